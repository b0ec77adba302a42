"""Kueue v0.19.2's ProvisioningRequest admission check controller on the test bed
(pkg/controller/admissionchecks/provisioning/controller.go), for checks whose AdmissionCheck names
controllerName kueue.x-k8s.io/provisioning-request and a ProvisioningRequestConfig as its parameters.

For a Workload holding quota with such a check not Ready (Reconcile -> syncOwnedProvisionRequest): one
ProvisioningRequest per Workload and check and attempt, named <workload>-<check>-<attempt>
(ProvisioningRequestName), owned by the Workload, with one PodTemplate per pod set named
ppt-<request>-<pod set> (getProvisioningRequestPodTemplateName: the pod set's template with the admission's
flavor node selectors, createPodTemplate). Then the check's state follows the request (syncCheckStates):
Provisioned=True -> Ready with pod set updates carrying the consume-provisioning-request and
provisioning-class-name annotations (podSetUpdates); Failed, or BookingExpired before admission -> Retry
while attempts stay within the config's retryStrategy.backoffLimitCount, else Rejected (the workload
controller then evicts or deactivates: checks.py); CapacityRevoked -> Rejected; Accepted -> Pending with the
Provisioned condition's message. A finished Workload's requests are deleted
(deleteUnusedProvisioningRequests).

Not modelled: podSetMergePolicy (each pod set is its own PodSet of the request), the config's
podSetUpdates.nodeSelector, managedResources (every pod set needs the request), requeueState backoff on
Retry, limitObjectName's hashing of names over 253 characters, the AdmissionCheck's Active condition.
The pure part is `decide`; ProvisioningController runs it against the API server.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from tpujob_sandbox import crdfiles
from tpujob_sandbox.kueue.checks import PENDING, READY, REJECTED, RETRY
from tpujob_sandbox.kueue.discovery import served_version
from tpujob_sandbox.kueue.objects import (
    GROUP,
    VERSIONS,
    Obj,
    admission,
    find_condition,
    format_time,
    has_quota_reservation,
    is_admitted,
    is_finished,
)
from tpujob_sandbox.listwatch import ListWatch
from tpujob_sandbox.operators import ensure_crd

log = logging.getLogger(__name__)

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"  # kueue.ProvisioningRequestControllerName
PR_GROUP, PR_VERSION = "autoscaling.x-k8s.io", "v1"
# cluster-autoscaler apis/provisioningrequest/autoscaling.x-k8s.io/v1/types.go
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "cluster-autoscaler.kubernetes.io/provisioning-class-name"
MANAGED_BY = {"kueue.x-k8s.io/managed": "true"}  # constants.ManagedByKueueLabelKey/Value
DEFAULT_BACKOFF_LIMIT = 3  # ProvisioningRequestRetryStrategy.BackoffLimitCount's default
PASS_SECONDS = 0.5


def request_name(workload: str, check: str, attempt: int) -> str:
    return f"{workload}-{check}-{attempt}"


def template_name(request: str, pod_set: str) -> str:
    return f"ppt-{request}-{pod_set}"


@dataclass
class Actions:
    create: list[tuple[list[Obj], Obj]] = field(default_factory=list)  # (PodTemplates, ProvisioningRequest)
    delete: list[tuple[str, str]] = field(default_factory=list)  # requests (namespace, name)
    check_states: dict[tuple[str, str], list[Obj]] = field(default_factory=dict)


def _true(obj: Obj, kind: str) -> Obj | None:
    found = find_condition(obj, kind)
    return found if found and found.get("status") == "True" else None


def _owner(wl: Obj) -> Obj:
    meta = wl["metadata"]
    return {
        "apiVersion": wl.get("apiVersion") or f"{GROUP}/{VERSIONS[0]}",  # the version it was listed in
        "kind": "Workload",
        "name": meta["name"],
        "uid": meta.get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _templates(wl: Obj, request: str, flavors: dict[str, Obj]) -> list[Obj]:
    """createPodTemplate: the pod set's template, the assigned flavors' node labels merged in."""
    assignments = {a.get("name"): a for a in (admission(wl) or {}).get("podSetAssignments") or []}
    templates = []
    for pod_set in (wl.get("spec") or {}).get("podSets") or []:
        template = copy.deepcopy(pod_set.get("template") or {})
        spec = template.setdefault("spec", {})
        for flavor in set(((assignments.get(pod_set["name"]) or {}).get("flavors") or {}).values()):
            labels = ((flavors.get(flavor) or {}).get("spec") or {}).get("nodeLabels") or {}
            spec["nodeSelector"] = {**labels, **(spec.get("nodeSelector") or {})}
        templates.append(
            {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {
                    "name": template_name(request, pod_set["name"]),
                    "namespace": wl["metadata"]["namespace"],
                    "labels": dict(MANAGED_BY),
                    "ownerReferences": [_owner(wl)],
                },
                "template": template,
            }
        )
    return templates


def _state(old: Obj, state: str, message: str, now: datetime, **extra: Any) -> Obj:
    moved = old.get("state") != state
    new = {**old, **extra, "state": state, "message": message}
    if moved:
        new["lastTransitionTime"] = format_time(now)
    return new


def _follow(wl: Obj, state: Obj, request: Obj, config: Obj, now: datetime) -> Obj:
    """syncCheckStates for one check, from its request's conditions."""
    attempt = int(request["metadata"]["name"].rsplit("-", 1)[1])
    limit = int(
        ((config.get("spec") or {}).get("retryStrategy") or {}).get(
            "backoffLimitCount", DEFAULT_BACKOFF_LIMIT
        )
    )
    retries = int(state.get("retryCount") or 0)
    failed, expired = _true(request, "Failed"), _true(request, "BookingExpired")
    if failed or (expired and not is_admitted(wl)):
        cause = failed or expired or {}
        if attempt <= limit:
            what = "failure" if failed else "booking expired"
            message = f"Retrying after {what}: {cause.get('message', '')}"
            if attempt > retries:
                return _state(state, RETRY, message, now, retryCount=attempt)
            return {**state, "message": message}
        return _state(state, REJECTED, str(cause.get("message", "")), now)
    if revoked := _true(request, "CapacityRevoked"):
        return _state(state, REJECTED, str(revoked.get("message", "")), now)
    if provisioned := _true(request, "Provisioned"):
        if state.get("state") == READY:
            return state
        updates = [
            {
                "name": ps["podTemplateRef"]["name"].removeprefix(f"ppt-{request['metadata']['name']}-"),
                "annotations": {
                    CONSUME_ANNOTATION: request["metadata"]["name"],
                    CLASS_ANNOTATION: request["spec"]["provisioningClassName"],
                },
            }
            for ps in request["spec"].get("podSets") or []
        ]
        return _state(state, READY, str(provisioned.get("message", "")), now, podSetUpdates=updates)
    if _true(request, "Accepted"):
        message = str((find_condition(request, "Provisioned") or {}).get("message") or "")
        return _state(state, PENDING, message, now)
    return _state(state, PENDING, "", now)


def decide(
    workloads: list[Obj],
    checks: list[Obj],
    configs: list[Obj],
    requests: list[Obj],
    flavors: list[Obj],
    now: datetime,
) -> Actions:
    actions = Actions()
    config_by_name = {c["metadata"]["name"]: c for c in configs}
    check_config = {
        c["metadata"]["name"]: config_by_name.get(
            ((c.get("spec") or {}).get("parameters") or {}).get("name", "")
        )
        for c in checks
        if (c.get("spec") or {}).get("controllerName") == CONTROLLER_NAME
    }
    flavor_by_name = {f["metadata"]["name"]: f for f in flavors}
    owned: dict[tuple[str, str], list[Obj]] = {}
    for request in requests:
        meta = request["metadata"]
        for ref in meta.get("ownerReferences") or []:
            if ref.get("kind") == "Workload":
                owned.setdefault((meta["namespace"], ref["name"]), []).append(request)
    for wl in workloads:
        meta = wl["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        mine = owned.get((namespace, name), [])
        if is_finished(wl):
            actions.delete += [(namespace, r["metadata"]["name"]) for r in mine]
            continue
        if not has_quota_reservation(wl) or _true(wl, "Evicted"):
            continue
        states = [dict(s) for s in (wl.get("status") or {}).get("admissionChecks") or []]
        changed = False
        for index, state in enumerate(states):
            check = str(state.get("name"))
            if check not in check_config:
                continue
            config = check_config[check]
            if config is None:  # the check is not active
                new = _state(state, PENDING, "the check is not active", now)
            else:
                attempt = int(state.get("retryCount") or 0) + 1
                wanted = request_name(name, check, attempt)
                current = next((r for r in mine if r["metadata"]["name"] == wanted), None)
                if current is None and state.get("state") == PENDING:
                    spec = config.get("spec") or {}
                    templates = _templates(wl, wanted, flavor_by_name)
                    body = {
                        "apiVersion": f"{PR_GROUP}/{PR_VERSION}",
                        "kind": "ProvisioningRequest",
                        "metadata": {
                            "name": wanted,
                            "namespace": namespace,
                            "labels": dict(MANAGED_BY),
                            "ownerReferences": [_owner(wl)],
                        },
                        "spec": {
                            "provisioningClassName": spec.get("provisioningClassName", ""),
                            "parameters": dict(spec.get("parameters") or {}),
                            "podSets": [
                                {
                                    "podTemplateRef": {"name": t["metadata"]["name"]},
                                    "count": ps.get("count", 1),
                                }
                                for t, ps in zip(templates, wl["spec"]["podSets"], strict=True)
                            ],
                        },
                    }
                    actions.create.append((templates, body))
                    continue
                if current is None:
                    continue
                new = _follow(wl, state, current, config, now)
            if new != state:
                states[index], changed = new, True
        if changed:
            actions.check_states[(namespace, name)] = states
    return actions


class ProvisioningController:
    """Runs `decide` every PASS_SECONDS (and at once when poked) against the API server."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core = k8s.CoreV1Api(api_client)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # The AdmissionChecks of each version Kueue's CRDs served, from a watch's cache (listwatch.py): every
        # pass reads them to learn whether any check is this controller's, mostly to find none.
        self._checks: dict[str, ListWatch] = {}

    def start(self) -> ProvisioningController:
        self._thread = threading.Thread(target=self._run, name="kueue-provisioning", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for cache in self._checks.values():
            cache.stop()

    def _admission_checks(self, version: str) -> list[Obj]:
        cache = self._checks.get(version)
        if cache is None:
            list_checks = functools.partial(
                self.custom.list_cluster_custom_object, GROUP, version, "admissionchecks"
            )
            cache = self._checks[version] = ListWatch(
                list_checks, name=f"admissionchecks-{version}", retry_seconds=PASS_SECONDS
            )
            cache.start()
        return cache.items()

    def _list(self, group: str, version: str, plural: str) -> list[Obj]:
        try:
            items: list[Obj] = self.custom.list_cluster_custom_object(group, version, plural)["items"]
        except k8s.ApiException as error:
            if error.status == 404:  # CRD absent
                return []
            raise
        return items

    def _run(self) -> None:
        while not self._stopping.wait(PASS_SECONDS):
            try:
                self.run_pass()
            except Exception as error:
                log.debug("kueue-sim provisioning: pass failed: %s", error)

    def run_pass(self) -> None:
        version = served_version(self.api_client)  # as Kueue's release speaks it (discovery.py)
        if version is None:
            return
        checks = self._admission_checks(version)
        if not any((c.get("spec") or {}).get("controllerName") == CONTROLLER_NAME for c in checks):
            return
        workloads = self._list(GROUP, version, "workloads")
        actions = decide(
            workloads,
            checks,
            self._list(GROUP, version, "provisioningrequestconfigs"),
            self._list(PR_GROUP, PR_VERSION, "provisioningrequests"),
            self._list(GROUP, version, "resourceflavors"),
            datetime.now().astimezone(),
        )
        for templates, request in actions.create:
            namespace = request["metadata"]["namespace"]
            for template in templates:
                with contextlib.suppress(k8s.ApiException):  # AlreadyExists: a pass before made it
                    self.core.create_namespaced_pod_template(namespace, template)
            with contextlib.suppress(k8s.ApiException):
                self.custom.create_namespaced_custom_object(
                    PR_GROUP, PR_VERSION, namespace, "provisioningrequests", request
                )
        for namespace, name in actions.delete:
            with contextlib.suppress(k8s.ApiException):
                self.custom.delete_namespaced_custom_object(
                    PR_GROUP, PR_VERSION, namespace, "provisioningrequests", name
                )
        versions = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in workloads}
        for (namespace, name), states in actions.check_states.items():
            body = {
                "metadata": {"resourceVersion": versions[(namespace, name)]["metadata"]["resourceVersion"]},
                "status": {"admissionChecks": states},
            }
            with contextlib.suppress(k8s.ApiException):  # 409: the next pass reads it again
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, version, namespace, "workloads", name, body
                )


# --- ProvisioningRequest's CRD on the test bed ------------------------------------------------------------

ENV_PR_CRDS = "TPUJOB_PROVISIONING_REQUEST_CRDS"
DEFAULT_PR_CRDS = Path(__file__).resolve().parents[3].parent / "shared" / "provisioningrequest" / "crds"
PR_CRDS_SOURCE = "https://github.com/kubernetes/autoscaler/tree/cluster-autoscaler-1.36.1/cluster-autoscaler/apis/config/crd"


class ProvisioningRequestCrdMissing(RuntimeError):
    pass


def install_crd(api_client: k8s.ApiClient) -> None:
    """cluster-autoscaler 1.36.1's ProvisioningRequest CRD (TPUJOB_PROVISIONING_REQUEST_CRDS, else
    ../shared/provisioningrequest/crds beside the repository), served v1 only, created unless present."""
    configured = os.environ.get(ENV_PR_CRDS)
    path = Path(configured) if configured else DEFAULT_PR_CRDS
    files = sorted(path.glob("*.yaml")) if path.is_dir() else []
    if not files:
        raise ProvisioningRequestCrdMissing(
            f"ProvisioningRequest's CRD is not at {path}: set {ENV_PR_CRDS} to a folder holding "
            f"autoscaling.x-k8s.io_provisioningrequests.yaml ({PR_CRDS_SOURCE})"
        )
    api = k8s.ApiextensionsV1Api(api_client)
    for document in crdfiles.crds(path):
        for version in document["spec"]["versions"]:
            version["served"] = version["name"] == PR_VERSION  # no conversion webhook here
        ensure_crd(api, document)
