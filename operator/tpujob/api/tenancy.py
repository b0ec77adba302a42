"""The tenancy policy: what each namespace's TPUJobs may do beyond the safe default, in one document a
platform team reads and reviews (the chart's `tenancy` value, the operator's TPUJOB_TENANCY_POLICY).

`defaults` holds for every namespace; `namespaces.<name>` overrides it field by field (a field it does not
name keeps the default). Every rule here depends on the namespace; the rules that do not (no unconfined
seccomp or AppArmor, no toleration without a key, no selector on the operator's labels) are the CRD's CEL
rules and pod_validation.py's, refused for everyone at `kubectl apply`.

`tenancy_problems` judges one job against its namespace's policy, naming each field and the fix, as
validation.py does for the schema's rules: the operator refuses such a job as InvalidSpec before anything
of it is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

import yaml
from pydantic import Field, ValidationError

from tpujob import tpu
from tpujob.api import constants as c
from tpujob.api.base import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, ApiModel, Problem
from tpujob.api.job import TPUJob
from tpujob.api.pod import Capabilities, ContainerSecurityContext, PodSecurityContext
from tpujob.api.spec import MAX_TERMINATION_GRACE_SECONDS, RESERVATION_PATTERN, CapacityMode, NodePoolPolicy

# Pod Security Standards, "restricted" profile: a container drops ALL and may add back only
# NET_BIND_SERVICE (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).
DEFAULT_CAPABILITIES = ("NET_BIND_SERVICE",)
# The "baseline" profile's list, for a platform team that runs its namespaces at PSA baseline: the container
# runtime's own defaults, which a plain pod gets without asking.
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
# spec.runPolicy.startupTimeoutSeconds: how long pods that cannot start may hold a slice.
DEFAULT_MIN_STARTUP_TIMEOUT_SECONDS = 60
DEFAULT_MAX_STARTUP_TIMEOUT_SECONDS = 3600
# spec.trainer.terminationGracePeriodSeconds: how long a stopped worker may hold its slice (and its chips,
# and the next job's start) while it saves. Five minutes is ten times the default 30 s, enough for a large
# model's save to a bucket; a namespace whose checkpoints take longer is given more.
DEFAULT_MAX_TERMINATION_GRACE_SECONDS = 300
MAX_POLICY_LIST = 256
SETTING = "TPUJOB_TENANCY_POLICY (the chart's tenancy value)"

CapabilityName = Annotated[str, Field(pattern=r"^(CAP_)?[A-Z_]+$", max_length=64)]


class NamespacePolicy(ApiModel):
    """What the TPUJobs of a namespace may do beyond the operator's safe default."""

    host_network: bool = Field(
        default=False,
        description=(
            "Allow spec.trainer.hostNetwork: faster DCN between slices (GKE's Multislice guides use it), "
            "but the pods share the node's network and its Google identity (no Workload Identity)."
        ),
    )
    privileged: bool = Field(default=False, description="Allow securityContext.privileged: root on the host.")
    allow_privilege_escalation: bool = Field(
        default=False, description="Allow securityContext.allowPrivilegeEscalation: true (setuid binaries)."
    )
    run_as_root: bool = Field(
        default=False,
        description=(
            "Allow root: runAsUser: 0 and runAsNonRoot: false (pod or container). Without it every pod runs "
            "with runAsNonRoot: true, so the kubelet refuses an image whose user is root."
        ),
    )
    capabilities: list[CapabilityName] = Field(
        default=list(DEFAULT_CAPABILITIES),
        max_length=MAX_POLICY_LIST,
        description=(
            "Linux capabilities a container may add (with or without CAP_). Default: NET_BIND_SERVICE, as "
            "Pod Security's restricted profile; its baseline profile allows "
            + ", ".join(BASELINE_CAPABILITIES)
        ),
    )
    existing_pools: bool = Field(
        default=True,
        description=(
            "Allow spec.nodePool.policy: existing (TPU nodes made outside the operator). The operator's own "
            "pools carry a taint only their job tolerates, so this never reaches another job's pool."
        ),
    )
    max_chips: int | None = Field(
        default=None,
        ge=0,
        description=(
            "TPU chips the namespace's TPUJobs may hold at once (queued through Kueue: the queue's quota "
            "instead). A job that would pass it waits (reason ChipLimit) before any pool is asked for. "
            "Unset: no limit."
        ),
    )
    reservations: list[Annotated[str, Field(pattern=RESERVATION_PATTERN, max_length=128)]] | None = Field(
        default=None,
        max_length=MAX_POLICY_LIST,
        description="Reservations spec.capacity.reservation may name. Unset: any; []: none.",
    )
    priority_classes: list[Annotated[str, Field(pattern=DNS_SUBDOMAIN_PATTERN, max_length=253)]] | None = (
        Field(
            default=None,
            max_length=MAX_POLICY_LIST,
            description="PriorityClasses spec.pod.priorityClassName, and WorkloadPriorityClasses the label "
            "kueue.x-k8s.io/priority-class, may name. Unset: any; []: none.",
        )
    )
    require_queue: bool = Field(
        default=False,
        description="Run this namespace's TPUJobs only through Kueue: a job without the label "
        "kueue.x-k8s.io/queue-name waits (Queued, reason QueueRequired) until it has one, as Kueue's "
        "manageJobsWithoutQueueName does for its own integrations.",
    )
    min_startup_timeout_seconds: int = Field(
        default=DEFAULT_MIN_STARTUP_TIMEOUT_SECONDS,
        ge=1,
        description="The floor of spec.runPolicy.startupTimeoutSeconds.",
    )
    max_startup_timeout_seconds: int = Field(
        default=DEFAULT_MAX_STARTUP_TIMEOUT_SECONDS,
        ge=1,
        description=(
            "The cap of spec.runPolicy.startupTimeoutSeconds: how long workers that cannot start may hold a "
            "slice. A job's 0 takes this value."
        ),
    )
    max_termination_grace_period_seconds: int = Field(
        default=DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
        ge=0,
        le=MAX_TERMINATION_GRACE_SECONDS,
        description=(
            "The cap of spec.trainer.terminationGracePeriodSeconds: how long a stopped worker may hold its "
            "slice while it saves its checkpoint (suspend, preemption, eviction, maintenance)."
        ),
    )


class TenancyPolicy(ApiModel):
    """The defaults, and each namespace's overrides of them."""

    defaults: NamespacePolicy = Field(
        default_factory=NamespacePolicy, description="Every namespace's policy."
    )
    namespaces: dict[Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)], NamespacePolicy] = (
        Field(
            default_factory=dict,
            description="A namespace's overrides of the defaults, field by field.",
        )
    )

    def for_namespace(self, namespace: str) -> NamespacePolicy:
        """The defaults, with what the namespace's entry names over them."""
        override = self.namespaces.get(namespace)
        if override is None:
            return self.defaults
        named = {name: getattr(override, name) for name in override.model_fields_set}
        return self.defaults.model_copy(update=named)


def parse_policy(text: str, source: str = SETTING) -> TenancyPolicy:
    """The policy from its YAML text (TPUJOB_TENANCY_POLICY, `tpujob validate --policy FILE`): empty is the
    default; a wrong document is a ValueError naming `source` and each field."""
    try:
        document = yaml.safe_load(text) if text.strip() else None
        return TenancyPolicy.model_validate(document or {})
    except yaml.YAMLError as error:
        raise ValueError(f"{source} is not YAML: {error}") from None
    except ValidationError as error:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise ValueError(f"{source}: {where}") from None


def capability(name: str) -> str:
    """CAP_SYS_ADMIN and SYS_ADMIN are one capability (Kubernetes passes either to the runtime)."""
    return name.upper().removeprefix("CAP_")


def with_defaults(job: TPUJob, policy: NamespacePolicy) -> TPUJob:
    """The job as its namespace's policy completes it: startupTimeoutSeconds 0 is the namespace's cap (before
    the policy, 0 held a slice forever); where root is not allowed, the pod runs with runAsNonRoot: true (an
    image whose user is root is refused by the kubelet, not only a job that says runAsUser: 0)."""
    spec = job.spec
    run_policy = spec.run_policy
    if not run_policy.startup_timeout_seconds:
        capped = run_policy.model_copy(update={"startup_timeout_seconds": policy.max_startup_timeout_seconds})
        spec = spec.model_copy(update={"run_policy": capped})
    context = spec.pod.security_context
    if not policy.run_as_root and (context is None or context.run_as_non_root is None):
        non_root = (context or PodSecurityContext()).model_copy(update={"run_as_non_root": True})
        spec = spec.model_copy(update={"pod": spec.pod.model_copy(update={"security_context": non_root})})
    return job if spec is job.spec else job.model_copy(update={"spec": spec})


def tenancy_problems(job: TPUJob, policy: NamespacePolicy) -> Iterator[Problem]:
    """Everything of `job` its namespace's policy does not allow, each with its field path and fix."""
    fix = _allow(job.metadata.namespace or "default")
    spec = job.spec
    if spec.trainer.host_network and not policy.host_network:
        yield Problem(
            "spec.trainer.hostNetwork",
            "host networking is not allowed in this namespace (the pods would share the node's network and "
            f"Google identity); remove it, {fix}hostNetwork: true",
        )
    containers: list[tuple[str, ContainerSecurityContext | None]] = [
        ("spec.trainer", spec.trainer.security_context),
        *(
            (f"spec.pod.initContainers[{i}]", x.security_context)
            for i, x in enumerate(spec.pod.init_containers)
        ),
        *((f"spec.pod.containers[{i}]", x.security_context) for i, x in enumerate(spec.pod.containers)),
    ]
    for path, context in containers:
        if context is not None:
            yield from _security_problems(f"{path}.securityContext", context, policy, fix)
    pod_context = spec.pod.security_context
    if pod_context is not None and pod_context.run_as_user == 0 and not policy.run_as_root:
        yield Problem("spec.pod.securityContext.runAsUser", f"{ROOT}, {fix}runAsRoot: true")
    if pod_context is not None and pod_context.run_as_non_root is False and not policy.run_as_root:
        yield Problem("spec.pod.securityContext.runAsNonRoot", f"{MAYBE_ROOT}, {fix}runAsRoot: true")
    yield from _placement_problems(job, policy, fix)


ROOT = "UID 0 (root) is not allowed in this namespace; run as another user (e.g. 1000)"
MAYBE_ROOT = (
    "runAsNonRoot: false is not allowed in this namespace (an image whose user is root would run as root); "
    "remove it and run as another user (e.g. runAsUser: 1000)"
)


def _allow(namespace: str) -> str:
    """The end of every message: who may allow it, and where (the setting is completed by the caller)."""
    return f"or have the platform team set it in {SETTING}: namespaces.{namespace}."


def _security_problems(
    path: str, context: ContainerSecurityContext, policy: NamespacePolicy, fix: str
) -> Iterator[Problem]:
    if context.privileged and not policy.privileged:
        yield Problem(
            f"{path}.privileged",
            "privileged containers are not allowed in this namespace (TPU chips come from the device plugin "
            f"without it); remove it, {fix}privileged: true",
        )
    if context.allow_privilege_escalation and not policy.allow_privilege_escalation:
        yield Problem(
            f"{path}.allowPrivilegeEscalation",
            "privilege escalation is not allowed in this namespace; remove it (the default is false), "
            f"{fix}allowPrivilegeEscalation: true",
        )
    if context.run_as_user == 0 and not policy.run_as_root:
        yield Problem(f"{path}.runAsUser", f"{ROOT}, {fix}runAsRoot: true")
    if context.run_as_non_root is False and not policy.run_as_root:
        yield Problem(f"{path}.runAsNonRoot", f"{MAYBE_ROOT}, {fix}runAsRoot: true")
    yield from _capability_problems(f"{path}.capabilities", context.capabilities, policy, fix)


def _capability_problems(
    path: str, capabilities: Capabilities | None, policy: NamespacePolicy, fix: str
) -> Iterator[Problem]:
    allowed = {capability(name) for name in policy.capabilities}
    for index, name in enumerate((capabilities.add if capabilities else None) or []):
        if capability(name) not in allowed:
            yield Problem(
                f"{path}.add[{index}]",
                f"adding {name} is not allowed in this namespace; allowed: "
                f"{', '.join(sorted(allowed)) or 'none'}; remove it, {fix}capabilities",
            )


def _placement_problems(job: TPUJob, policy: NamespacePolicy, fix: str) -> Iterator[Problem]:
    spec = job.spec
    if spec.node_pool.policy == NodePoolPolicy.existing and not policy.existing_pools:
        yield Problem(
            "spec.nodePool.policy",
            f"existing pools are not allowed in this namespace; use policy: create (the operator makes the "
            f"job's own pools), {fix}existingPools: true",
        )
    reservation = spec.capacity.reservation
    if (
        spec.capacity.mode == CapacityMode.reservation
        and reservation
        and policy.reservations is not None
        and reservation not in policy.reservations
    ):
        yield Problem(
            "spec.capacity.reservation",
            f"reservation {reservation} is not one this namespace may consume; allowed: "
            f"{', '.join(policy.reservations) or 'none'}; name one of them, {fix}reservations",
        )
    labels = job.metadata.labels or {}
    for path, priority in (
        ("spec.pod.priorityClassName", spec.pod.priority_class_name),
        # Kueue's WorkloadPriorityClass: the Workload (and its preemptions) take it before the pods' own.
        (f"metadata.labels['{c.LABEL_PRIORITY_CLASS}']", labels.get(c.LABEL_PRIORITY_CLASS)),
    ):
        if priority and policy.priority_classes is not None and priority not in policy.priority_classes:
            yield Problem(
                path,
                f"PriorityClass {priority} is not allowed in this namespace; allowed: "
                f"{', '.join(policy.priority_classes) or 'none'}; use one of them, {fix}priorityClasses",
            )
    yield from _startup_timeout_problems(job, policy, fix)
    grace, grace_cap = (
        spec.trainer.termination_grace_period_seconds,
        policy.max_termination_grace_period_seconds,
    )
    if grace > grace_cap:
        yield Problem(
            "spec.trainer.terminationGracePeriodSeconds",
            f"{grace} s is above this namespace's cap of {grace_cap} s (a stopped worker holds its slice "
            f"that long while it saves); set at most {grace_cap}, save checkpoints more often, "
            f"{fix}maxTerminationGracePeriodSeconds",
        )
    if policy.max_chips is not None:
        try:
            chips = tpu.resolve_slice(spec.tpu.type, spec.tpu.topology, spec.tpu.machine_type).chips
        except tpu.CatalogError:
            return  # validation.py names the TPU problem
        total = chips * spec.tpu.slices
        if total > policy.max_chips:
            yield Problem(
                "spec.tpu",
                f"the job needs {total} TPU chips and this namespace may hold at most {policy.max_chips}: it "
                f"could never start; use a smaller topology or fewer slices, {fix}maxChips",
            )


def _startup_timeout_problems(job: TPUJob, policy: NamespacePolicy, fix: str) -> Iterator[Problem]:
    value = job.spec.run_policy.startup_timeout_seconds
    floor, cap = policy.min_startup_timeout_seconds, policy.max_startup_timeout_seconds
    if value and value > cap:
        yield Problem(
            "spec.runPolicy.startupTimeoutSeconds",
            f"{value} s is above this namespace's cap of {cap} s (pods that cannot start would hold the "
            f"slice that long); set at most {cap} (or 0 for the cap), {fix}maxStartupTimeoutSeconds",
        )
    elif value and value < floor:
        yield Problem(
            "spec.runPolicy.startupTimeoutSeconds",
            f"{value} s is below this namespace's floor of {floor} s (too short for a TPU image to pull); "
            f"set at least {floor}, {fix}minStartupTimeoutSeconds",
        )
