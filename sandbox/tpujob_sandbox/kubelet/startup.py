"""What the simulated kubelet checks before a pod's containers can start, in the kubelet's order: the pod's
Secret and ConfigMap volumes mount (volume manager, before any container), then each init container and
container in turn: its image (images.ensure_image), then its config (config.referenced_env). The first
problem keeps the pod Pending with that container waiting, the kubelet's events posted, and a look again
when the kubelet would try again. Reads the API (Secrets, ConfigMaps); posts events."""

from __future__ import annotations

import base64
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from tpujob_sandbox.kubelet.config import (
    CONFIG_MAP,
    SECRET,
    ContainerConfigError,
    downward_api_files,
    missing_volume,
    referenced_env,
    volume_files,
)
from tpujob_sandbox.kubelet.images import PullBackOff, Registry, docker_config_credentials, ensure_image
from tpujob_sandbox.kubelet.podstatus import status_time

# The pod worker's wait before it syncs a pod whose sync failed again (pkg/kubelet/pod_workers.go: the
# kubelet's backOffPeriod, 10 s).
SYNC_RETRY_SECONDS = 10.0
GCS_FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"


@dataclass(frozen=True)
class Blocked:
    """A container that cannot start: the pod's status to post, and when to look again (seconds)."""

    status: dict[str, Any]
    retry_seconds: float


@dataclass(frozen=True)
class Ready:
    """Every container may start: per container, its env from Secrets and ConfigMaps; per mount path, the
    local folder that stands for its volume."""

    env: dict[str, dict[str, str]] = field(default_factory=dict)
    mounts: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)


class StartChecks:
    def __init__(
        self, core: k8s.CoreV1Api, state_dir: Path, registry: Registry, back_off: PullBackOff
    ) -> None:
        self.core = core
        self.state_dir = state_dir
        self.registry = registry
        self.back_off = back_off
        self.scale = back_off.scale
        self._node_images: dict[str, set[str]] = {}

    @property
    def gcs_root(self) -> Path:
        """Cloud Storage cannot exist here: a bucket is a folder of this one, for gs:// paths and GCS FUSE."""
        return self.state_dir / "gcs"

    def check(self, pod: dict[str, Any], host_ip: str) -> Blocked | Ready:
        namespace = pod["metadata"]["namespace"]
        read = self._reader(namespace)
        if (failed := missing_volume(pod, read)) is not None:
            self._event(pod, "Warning", "FailedMount", failed[1])
            return Blocked(waiting_status(pod, host_ip, {}), SYNC_RETRY_SECONDS * self.scale)
        node = pod["spec"]["nodeName"]
        on_node = self._node_images.setdefault(node, set())
        credentials = self._credentials(pod, read)
        env: dict[str, dict[str, str]] = {}
        spec = pod["spec"]
        for container in [*(spec.get("initContainers") or []), *spec["containers"]]:
            pulled = ensure_image(
                container,
                pod["metadata"]["uid"],
                on_node=container["image"] in on_node,
                registry=self.registry,
                credentials=credentials,
                back_off=self.back_off,
                now=time.monotonic(),
            )
            for type_, reason, message in pulled.events:
                self._event(pod, type_, reason, message, container["name"])
            if pulled.reason:
                retry = self.back_off.next_try((pod["metadata"]["uid"], container["image"]))
                wait = (retry - time.monotonic()) if retry else SYNC_RETRY_SECONDS * self.scale
                waiting = {container["name"]: (pulled.reason, pulled.message)}
                return Blocked(waiting_status(pod, host_ip, waiting), max(wait, 0.05))
            on_node.add(container["image"])
            try:
                env[container["name"]] = referenced_env(pod, container, read)
            except ContainerConfigError as error:
                self._event(pod, "Warning", "Failed", f"Error: {error}", container["name"])
                waiting = {container["name"]: ("CreateContainerConfigError", str(error))}
                return Blocked(waiting_status(pod, host_ip, waiting), SYNC_RETRY_SECONDS * self.scale)
        return Ready(env=env, mounts=self._mounts(pod, read))

    def _mounts(self, pod: dict[str, Any], read: Any) -> dict[str, tuple[tuple[str, str], ...]]:
        """Per container, (mountPath, local folder) for its volumes a local process can see: Secret and
        ConfigMap files written out, emptyDir and PVC folders, a GCS FUSE bucket's folder."""
        meta = pod["metadata"]
        base = self.state_dir / "volumes" / f"{meta['namespace']}_{meta['name']}"
        folders: dict[str, Path] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            csi = volume.get("csi") or {}
            if csi.get("driver") == GCS_FUSE_DRIVER:
                folders[name] = self.gcs_root / (csi.get("volumeAttributes") or {}).get("bucketName", "_")
            elif claim := volume.get("persistentVolumeClaim"):
                folders[name] = self.state_dir / "claims" / meta["namespace"] / claim["claimName"]
            elif (files := _files(volume, pod, read)) is not None or "emptyDir" in volume:
                folders[name] = base / name
                for path, text in (files or {}).items():
                    (base / name / path).parent.mkdir(parents=True, exist_ok=True)
                    (base / name / path).write_text(text)
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        spec = pod["spec"]
        return {
            container["name"]: tuple(
                (mount["mountPath"], str(folders[mount["name"]] / mount.get("subPath", "")).rstrip("/"))
                for mount in container.get("volumeMounts") or []
                if mount["name"] in folders
            )
            for container in [*(spec.get("initContainers") or []), *spec["containers"]]
        }

    def refresh_downward_api(self, pod: dict[str, Any]) -> None:
        """Rewrite a running pod's downward API files from its metadata as it is now (the kubelet's sync of
        a pod whose labels or annotations changed). Each file is replaced whole (rename), as the kubelet's
        atomic writer swaps its data directory, so a reader never sees half a file."""
        meta = pod["metadata"]
        base = self.state_dir / "volumes" / f"{meta['namespace']}_{meta['name']}"
        for volume in pod["spec"].get("volumes") or []:
            for path, text in (downward_api_files(volume, pod) or {}).items():
                target = base / volume["name"] / path
                if target.exists() and target.read_text() == text:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                staged = target.with_name(f".{target.name}.tmp")
                staged.write_text(text)
                staged.replace(target)

    def _credentials(self, pod: dict[str, Any], read: Any) -> list[tuple[str, str, str]]:
        found: list[tuple[str, str, str]] = []
        for ref in pod["spec"].get("imagePullSecrets") or []:
            data = self._secret(pod["metadata"]["namespace"], ref["name"], raw=True)
            if data is not None:  # a pull secret that does not exist is skipped, as the kubelet does
                found += docker_config_credentials(data)
        return found

    def _reader(self, namespace: str) -> Any:
        def read(kind: str, name: str) -> dict[str, str] | None:
            if kind == SECRET:
                return self._secret(namespace, name)
            assert kind == CONFIG_MAP
            try:
                config_map = self.core.read_namespaced_config_map(name, namespace)
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return dict(config_map.data or {})

        return read

    def _secret(self, namespace: str, name: str, *, raw: bool = False) -> dict[str, str] | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = dict(secret.data or {})
        return data if raw else {key: base64.b64decode(value).decode() for key, value in data.items()}

    def _event(self, pod: dict[str, Any], type_: str, reason: str, message: str, container: str = "") -> None:
        """An event as the kubelet posts it: about the pod (its container's field path), from the node."""
        meta, now = pod["metadata"], status_time()
        involved = k8s.V1ObjectReference(
            api_version="v1", kind="Pod", name=meta["name"], namespace=meta["namespace"], uid=meta["uid"]
        )
        if container:
            involved.field_path = f"spec.containers{{{container}}}"
        event = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{meta['name']}."),
            involved_object=involved,
            type=type_,
            reason=reason,
            message=message,
            source=k8s.V1EventSource(component="kubelet", host=pod["spec"].get("nodeName")),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        with contextlib.suppress(ApiException):  # the kubelet's events are best effort too
            self.core.create_namespaced_event(meta["namespace"], event)


def _files(volume: dict[str, Any], pod: dict[str, Any], read: Any) -> dict[str, str] | None:
    """A Secret, ConfigMap or downward API volume's files; None for other kinds."""
    files = volume_files(volume, read)
    return files if files is not None else downward_api_files(volume, pod)


def waiting_status(pod: dict[str, Any], host_ip: str, waiting: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """A Pending pod on its node whose containers have not started: `waiting` names a container's reason
    and message; the others wait in ContainerCreating (PodInitializing behind init containers)."""
    now = status_time()
    spec = pod["spec"]
    inits = spec.get("initContainers") or []

    def statuses(containers: list[dict[str, Any]], default: str) -> list[dict[str, Any]]:
        return [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "waiting": dict(
                        zip(("reason", "message"), waiting.get(c["name"], (default, "")), strict=True)
                    )
                },
            }
            for c in containers
        ]

    status: dict[str, Any] = {
        "phase": "Pending",
        "hostIP": host_ip,
        "startTime": (pod.get("status") or {}).get("startTime") or now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "False" if inits else "True", "lastTransitionTime": now},
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "ContainersNotReady",
                "lastTransitionTime": now,
            },
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now},
        ],
        "containerStatuses": statuses(
            spec["containers"], "PodInitializing" if inits else "ContainerCreating"
        ),
    }
    if inits:
        status["initContainerStatuses"] = statuses(inits, "PodInitializing")
    for entry in status["containerStatuses"] + status.get("initContainerStatuses", []):
        if not entry["state"]["waiting"].get("message"):
            entry["state"]["waiting"].pop("message", None)
    return status
