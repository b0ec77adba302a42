"""Kueue's real CRDs on the test bed's CRD server, of one release at a time (v0.19.2 by default; v0.17.1,
what xpk installs; v0.14.8, v1beta1 only): where they come from, install and uninstall."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tpujob_sandbox import crdfiles
from tpujob_sandbox.kueue.discovery import served_version
from tpujob_sandbox.kueue.objects import GROUP, RESOURCE_IN_USE_FINALIZER
from tpujob_sandbox.operators import ensure_crd
from tpujob_sandbox.reads import get_json
from tpujob_sandbox.waiting import wait_for

ENV_KUEUE_CRDS = "TPUJOB_KUEUE_CRDS"
# sandbox/tpujob_sandbox/kueue/ -> the repository root -> ../shared/kueue/crds beside it.
REPOSITORY_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_KUEUE_CRDS = REPOSITORY_ROOT.parent / "shared" / "kueue" / "crds"
# The releases the test bed runs: the newest in TPUJOB_KUEUE_CRDS's folder, the others in <release>/crds
# beside it (../shared/kueue/README.md).
NEWEST = "v0.19.2"
RELEASES = (NEWEST, "v0.17.1", "v0.14.8")
# On each CRD installed: which release's it is (the test bed's own note), so a test asking for another
# release gets its CRDs replaced.
RELEASE_ANNOTATION = "sandbox.tpujob.dev/kueue-release"


def crds_source(release: str) -> str:
    """Where Kueue publishes them (its release manifests carry them too)."""
    return f"https://github.com/kubernetes-sigs/kueue/tree/{release}/config/components/crd/bases"


class KueueCrdsMissing(RuntimeError):
    pass


def crds_path(release: str = NEWEST) -> Path:
    """The release's CRDs: TPUJOB_KUEUE_CRDS (the newest's folder, else ../shared/kueue/crds beside the
    repository), or <release>/crds beside that folder for an older release."""
    configured = os.environ.get(ENV_KUEUE_CRDS)
    newest = Path(configured) if configured else DEFAULT_KUEUE_CRDS
    path = newest if release == NEWEST else newest.parent / release / "crds"
    if not path.is_dir() or not list(path.glob("*.yaml")):
        setting = f"{ENV_KUEUE_CRDS}={configured}" if configured else f"{ENV_KUEUE_CRDS} unset, the default"
        older = (
            f", with Kueue {release}'s in <that folder>/../{release}/crds ({crds_source(release)})"
            if release != NEWEST
            else ""
        )
        raise KueueCrdsMissing(
            f"Kueue {release}'s CRDs are not at {path} ({setting}): set {ENV_KUEUE_CRDS} to a folder holding "
            f"Kueue {NEWEST}'s config/components/crd/bases/*.yaml ({crds_source(NEWEST)}){older}"
        )
    return path


def load_crds(path: Path | None = None, release: str = NEWEST) -> list[dict[str, Any]]:
    """The CRDs, each serving its storage version only (v1beta2 from Kueue v0.16, v1beta1 before): the
    files carry no conversion webhook (Kueue's release manifests add one), and without it the API server
    would hand out one version's objects relabelled as the other's."""
    definitions = crdfiles.crds(path or crds_path(release))
    for document in definitions:
        for version in document["spec"]["versions"]:
            version["served"] = bool(version.get("storage"))
        document["metadata"].setdefault("annotations", {})[RELEASE_ANNOTATION] = release
    return definitions


def install(api_client: k8s.ApiClient, release: str = NEWEST) -> list[str]:
    """Every Kueue CRD of the release, created unless present, each served before this returns; another
    release's installed are uninstalled first. Returns their names."""
    api = k8s.ApiextensionsV1Api(api_client)
    definitions = load_crds(release=release)
    names = [d["metadata"]["name"] for d in definitions]
    if installed(api_client, names, release):
        return names  # the common case in a session: one list and one discovery read
    if installed_release(api_client) not in (None, release):
        uninstall(api_client)
    for definition in definitions:
        ensure_crd(api, definition)
    return names


def installed_release(api_client: k8s.ApiClient) -> str | None:
    """The release of the Kueue CRDs installed (None: none; "" one without the test bed's note)."""
    api = k8s.ApiextensionsV1Api(api_client)
    for definition in api.list_custom_resource_definition().items:
        if definition.spec.group == GROUP:
            return str((definition.metadata.annotations or {}).get(RELEASE_ANNOTATION) or "")
    return None


def group_served(api_client: k8s.ApiClient) -> bool:
    """kueue.x-k8s.io in the cluster's discovery (/apis)."""
    return any(group["name"] == GROUP for group in get_json(api_client, "/apis").get("groups", []))


def installed(api_client: k8s.ApiClient, names: list[str], release: str = NEWEST) -> bool:
    """Every one of these CRDs of that release Established and not being deleted, and the group in
    discovery."""
    api = k8s.ApiextensionsV1Api(api_client)
    ready = {
        d.metadata.name
        for d in api.list_custom_resource_definition().items
        if d.spec.group == GROUP
        and not d.metadata.deletion_timestamp
        and (d.metadata.annotations or {}).get(RELEASE_ANNOTATION) == release
        and any(c.type == "Established" and c.status == "True" for c in (d.status.conditions or []))
    }
    return set(names) <= ready and group_served(api_client)


def uninstall(api_client: k8s.ApiClient, timeout: float = 60) -> None:
    """Delete every CRD of kueue.x-k8s.io and wait until the group is no longer served."""
    api = k8s.ApiextensionsV1Api(api_client)
    _release_workloads(api_client)
    for definition in api.list_custom_resource_definition().items:
        if definition.spec.group == GROUP:
            try:
                api.delete_custom_resource_definition(definition.metadata.name)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise
    nudged: dict[str, float] = {}

    def gone() -> bool:
        left = [d for d in api.list_custom_resource_definition().items if d.spec.group == GROUP]
        for definition in left:
            _nudge_if_stuck(api, definition, nudged)
        return not left

    wait_for(
        gone,
        timeout=timeout,
        what="Kueue's CRDs to be deleted",
        last_state=lambda: [
            (
                d.metadata.name,
                [(c.type, c.status, c.message) for c in d.status.conditions or [] if c.type != "Established"],
            )
            for d in api.list_custom_resource_definition().items
            if d.spec.group == GROUP
        ],
    )
    wait_for(lambda: not group_served(api_client), timeout=timeout, what=f"{GROUP} to be no longer served")


# The CRD server's finalizer lists a deleted CRD's instances before it lets it go; when that list fails
# (seen on the 1.36 CRD server under load: "could not list instances: storage is (re)initializing", the
# watch cache's 429 while it initializes) the CRD is requeued with the work queue's per-item exponential
# backoff (processNextWorkItem: AddRateLimited), which failures in a row grow past the test's whole wait. An
# update to the CRD other than its Terminating condition queues it again at once
# (updateCustomResourceDefinition: queue.Add; apiextensions-apiserver/pkg/controller/finalizer/
# crd_finalizer.go): an annotation, a second apart.
NUDGE_SECONDS = 1.0


def _nudge_if_stuck(
    api: k8s.ApiextensionsV1Api, definition: k8s.V1CustomResourceDefinition, nudged: dict[str, float]
) -> None:
    name = definition.metadata.name
    stuck = any(
        c.type == "Terminating" and "could not list instances" in (c.message or "")
        for c in definition.status.conditions or []
    )
    now = time.monotonic()
    if not stuck or now - nudged.get(name, 0.0) < NUDGE_SECONDS:
        return
    nudged[name] = now
    with contextlib.suppress(k8s.ApiException):  # gone meanwhile: nothing to nudge
        api.patch_custom_resource_definition(
            name, {"metadata": {"annotations": {"sandbox.tpujob.dev/finalizer-nudge": str(now)}}}
        )


def _release_workloads(api_client: k8s.ApiClient) -> None:
    """Drop Kueue's finalizer from every Workload left, as removing Kueue from a cluster asks of its admin:
    with no Kueue to finish them, they would keep the Workload CRD from going."""
    custom = k8s.CustomObjectsApi(api_client)
    version = served_version(api_client)
    if version is None:
        return
    try:
        workloads = custom.list_cluster_custom_object(GROUP, version, "workloads")["items"]
    except k8s.ApiException as error:
        if error.status == 404:
            return
        raise
    for wl in workloads:
        finalizers = wl["metadata"].get("finalizers") or []
        if RESOURCE_IN_USE_FINALIZER in finalizers:
            kept = [f for f in finalizers if f != RESOURCE_IN_USE_FINALIZER]
            body = {"metadata": {"finalizers": kept, "resourceVersion": wl["metadata"]["resourceVersion"]}}
            try:
                meta = wl["metadata"]
                api_client.call_api(
                    f"/apis/{GROUP}/{version}/namespaces/{meta['namespace']}/workloads/{meta['name']}",
                    "PATCH",
                    header_params={"Content-Type": "application/merge-patch+json"},
                    body=body,
                    auth_settings=["BearerToken"],
                )
            except k8s.ApiException as error:
                if error.status not in (404, 409):
                    raise
