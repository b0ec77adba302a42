"""A container's configuration as the kubelet resolves it before it creates the container: env from
Secrets, ConfigMaps and the downward API, envFrom, and the Secret and ConfigMap volumes a pod mounts.

The kubelet's side (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go makeEnvironmentVariables; the
start fails with waiting reason CreateContainerConfigError and the error as its message,
pkg/kubelet/kuberuntime/kuberuntime_container.go startContainer, and is tried again on the pod worker's
next sync, about 10 s later on an error, pkg/kubelet/pod_workers.go backOffPeriod):
- a Secret or ConfigMap that does not exist: the API's not-found error, `secret "<name>" not found` /
  `configmap "<name>" not found`, unless the reference is optional;
- a key it lacks: `couldn't find key <key> in Secret <namespace>/<name>` (ConfigMap alike), unless
  optional;
- envFrom: every key, with the prefix, a missing source again an error unless optional.
A Secret or ConfigMap volume whose object does not exist never mounts: the container waits in
ContainerCreating and the kubelet posts FailedMount, `MountVolume.SetUp failed for volume "<volume>" :
secret "<name>" not found` (pkg/volume/secret/secret.go SetUpAt; configmap alike).

Reads go through `read(kind, name)`: the object's data as text, or None when it does not exist.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Read = Callable[[str, str], dict[str, str] | None]
SECRET, CONFIG_MAP = "Secret", "ConfigMap"


class ContainerConfigError(Exception):
    """The container cannot be created as configured (CreateContainerConfigError); str() is the kubelet's
    message."""


def _not_found(kind: str, name: str) -> str:
    return f'{"secret" if kind == SECRET else "configmap"} "{name}" not found'


def _key_from(read: Read, namespace: str, kind: str, ref: dict[str, Any]) -> str | None:
    data = read(kind, ref["name"])
    optional = bool(ref.get("optional"))
    if data is None:
        if optional:
            return None
        raise ContainerConfigError(_not_found(kind, ref["name"]))
    if ref["key"] not in data:
        if optional:
            return None
        raise ContainerConfigError(f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}")
    return data[ref["key"]]


def referenced_env(pod: dict[str, Any], container: dict[str, Any], read: Read) -> dict[str, str]:
    """The container's env that comes from Secrets and ConfigMaps (envFrom first, then env entries, as the
    kubelet orders them); raises ContainerConfigError as the kubelet would refuse the container."""
    namespace = pod["metadata"].get("namespace") or "default"
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind, ref = (
            (SECRET, source["secretRef"]) if source.get("secretRef") else (CONFIG_MAP, source["configMapRef"])
        )
        data = read(kind, ref["name"])
        if data is None:
            if ref.get("optional"):
                continue
            raise ContainerConfigError(_not_found(kind, ref["name"]))
        env.update({source.get("prefix", "") + key: value for key, value in data.items()})
    for entry in container.get("env") or []:
        value_from = entry.get("valueFrom") or {}
        for kind, field in ((SECRET, "secretKeyRef"), (CONFIG_MAP, "configMapKeyRef")):
            if field in value_from:
                value = _key_from(read, namespace, kind, value_from[field])
                if value is not None:
                    env[entry["name"]] = value
    return env


def missing_volume(pod: dict[str, Any], read: Read) -> tuple[str, str] | None:
    """(volume name, FailedMount message) for the first Secret or ConfigMap volume that cannot mount."""
    for volume in pod["spec"].get("volumes") or []:
        for kind, field, name_key in ((SECRET, "secret", "secretName"), (CONFIG_MAP, "configMap", "name")):
            source = volume.get(field)
            if source is None or source.get("optional"):
                continue
            if read(kind, source[name_key]) is None:
                cause = _not_found(kind, source[name_key])
                return volume["name"], f'MountVolume.SetUp failed for volume "{volume["name"]}" : {cause}'
    return None


def volume_files(volume: dict[str, Any], read: Read) -> dict[str, str] | None:
    """The files a Secret or ConfigMap volume holds (path -> text: every key, or its `items`); None for
    other volume kinds."""
    for kind, field, name_key in ((SECRET, "secret", "secretName"), (CONFIG_MAP, "configMap", "name")):
        source = volume.get(field)
        if source is None:
            continue
        data = read(kind, source[name_key]) or {}
        items = source.get("items")
        if not items:
            return dict(data)
        return {item["path"]: data[item["key"]] for item in items if item["key"] in data}
    return None


def downward_api_files(volume: dict[str, Any], pod: dict[str, Any]) -> dict[str, str] | None:
    """The files of a downward API volume (path -> text) from the pod's metadata fields its items name
    (metadata.name, .namespace, .uid, .labels, .annotations and one label or annotation by key, the fields
    a downwardAPI volume may take); None for other volume kinds. The kubelet writes them when the volume is
    set up and again when the pod's labels or annotations change (kubernetes.io/docs/concepts/workloads/
    pods/downward-api/, "Information available via fieldRef")."""
    source = volume.get("downwardAPI")
    if source is None:
        return None
    meta = pod["metadata"]
    files: dict[str, str] = {}
    for item in source.get("items") or []:
        path = (item.get("fieldRef") or {}).get("fieldPath", "")
        for kind in ("labels", "annotations"):
            values = meta.get(kind) or {}
            if path == f"metadata.{kind}":
                files[item["path"]] = "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
            elif path.startswith(f"metadata.{kind}['") and path.endswith("']"):
                files[item["path"]] = values.get(path[len(f"metadata.{kind}['") : -2], "")
        if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
            files[item["path"]] = str(meta.get(path.split(".")[1], ""))
    return files
