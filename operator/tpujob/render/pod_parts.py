"""The team's part of a worker pod (spec.trainer's container fields, spec.pod), merged over the operator's.

Pure and deterministic. The operator's part comes first and wins where both speak: the trainer is the first
container, its env starts with the worker env, the operator's labels, node selector and tolerations stay as
they are (validation refuses the keys the operator sets, so a clash does not reach here).
"""

from __future__ import annotations

from typing import Any

from tpujob.api.base import ApiModel
from tpujob.api.pod import Container, ContainerSecurityContext, InitContainer, WorkerPodSpec
from tpujob.api.spec import TrainerSpec

# Restrictive but working: TPU devices come from the device plugin (GKE >= 1.28), so no privilege is
# needed. runAsNonRoot is the namespace's tenancy policy's (api/tenancy.py with_defaults sets it on the pod
# unless the namespace allows root), and always true for the shipped trainer (plan.py).
DEFAULT_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def compact(value: Any) -> Any:
    """Without empty lists and maps (Kubernetes reads them as unset): the manifest says only what is set."""
    if isinstance(value, dict):
        items = ((k, compact(v)) for k, v in value.items())
        return {k: v for k, v in items if v != [] and v != {}}
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


def wire(model: ApiModel) -> dict[str, Any]:
    rendered: dict[str, Any] = compact(model.to_wire())
    return rendered


def security_context(user: ContainerSecurityContext | None) -> dict[str, Any]:
    """The operator's defaults with the user's fields over them, field by field. A privileged container, or
    one that adds CAP_SYS_ADMIN, keeps no default allowPrivilegeEscalation: false (Kubernetes refuses the
    pair, pkg/apis/core/validation ValidateSecurityContext)."""
    merged: dict[str, Any] = {
        "allowPrivilegeEscalation": DEFAULT_SECURITY_CONTEXT["allowPrivilegeEscalation"],
        "capabilities": dict(DEFAULT_SECURITY_CONTEXT["capabilities"]),
        "seccompProfile": dict(DEFAULT_SECURITY_CONTEXT["seccompProfile"]),
    }
    if user is None:
        return merged
    wire = user.to_wire()
    capabilities = wire.pop("capabilities", {})
    # A job's drop list only adds to ALL: `drop: []` would otherwise give back the runtime's default set.
    dropped = [name for name in capabilities.pop("drop", None) or [] if name != "ALL"]
    merged["capabilities"] = {"drop": ["ALL", *dropped], **capabilities}
    merged.update(wire)
    escalates = user.privileged or "CAP_SYS_ADMIN" in ((user.capabilities and user.capabilities.add) or [])
    if escalates and user.allow_privilege_escalation is None:
        del merged["allowPrivilegeEscalation"]
    return merged


def env_from_and_mounts(container: TrainerSpec | Container) -> dict[str, Any]:
    """A container's envFrom and volumeMounts as Kubernetes takes them; empty ones left out."""
    fields: dict[str, Any] = {}
    if container.env_from:
        fields["envFrom"] = [wire(source) for source in container.env_from]
    if container.volume_mounts:
        fields["volumeMounts"] = [wire(mount) for mount in container.volume_mounts]
    return fields


def extra_container(container: Container | InitContainer) -> dict[str, Any]:
    """A sidecar or init container, under the operator's security defaults."""
    rendered: dict[str, Any] = {"name": container.name, "image": container.image}
    for key in ("command", "args"):
        if getattr(container, key):
            rendered[key] = list(getattr(container, key))
    if container.working_dir:
        rendered["workingDir"] = container.working_dir
    if container.env:
        rendered["env"] = [wire(var) for var in container.env]
    rendered.update(env_from_and_mounts(container))
    if container.ports:
        rendered["ports"] = [wire(port) for port in container.ports]
    resources = wire(container.resources)
    if resources:
        rendered["resources"] = resources
    if container.image_pull_policy:
        rendered["imagePullPolicy"] = container.image_pull_policy
    if isinstance(container, InitContainer) and container.restart_policy:
        rendered["restartPolicy"] = container.restart_policy
    rendered["securityContext"] = security_context(container.security_context)
    return rendered


def merge_pod(spec: dict[str, Any], metadata: dict[str, Any], pod: WorkerPodSpec) -> None:
    """Add spec.pod to a rendered pod's spec and metadata, in place."""
    metadata["labels"] = {**pod.labels, **metadata["labels"]}
    if pod.annotations:  # the operator's own (the restart attempt of RecreateSlice) win
        metadata["annotations"] = {**pod.annotations, **metadata.get("annotations", {})}
    spec["nodeSelector"] = {**pod.node_selector, **spec["nodeSelector"]}
    spec["tolerations"] = [*spec["tolerations"], *(wire(toleration) for toleration in pod.tolerations)]
    if pod.init_containers:
        spec["initContainers"] = [extra_container(container) for container in pod.init_containers]
    spec["containers"] = [*spec["containers"], *(extra_container(container) for container in pod.containers)]
    if pod.volumes:  # after the operator's own (the restart attempt's downward API volume)
        spec["volumes"] = [*spec.get("volumes", []), *(wire(volume) for volume in pod.volumes)]
    if pod.image_pull_secrets:
        spec["imagePullSecrets"] = [wire(secret) for secret in pod.image_pull_secrets]
    if pod.priority_class_name:
        spec["priorityClassName"] = pod.priority_class_name
    context = wire(pod.security_context) if pod.security_context is not None else {}
    if context:
        spec["securityContext"] = context
