"""What the operator says about a bad spec, as templates shared by its own validation (validation.py,
pod_validation.py: `str.format`) and by the CRD's CEL rules (cel.py: `cel.cel_format` turns a template into a
CEL string expression), so `kubectl apply` and the operator's InvalidSpec give the same words. The TPU
catalog's own refusals are in tpu.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

# metadata
SHAPE_FIXED: Final = (
    "cannot change once the job has left Pending and Queued (it holds TPUs of the shape it was admitted "
    "with): put it back, or delete the job and create it anew"
)
NAME_TOO_LONG: Final = (
    "'{name}' is longer than {max} characters; pod hostnames add a suffix and must fit in a 63-character DNS "
    "label"
)

# spec.tpu
MULTISLICE_OF_ONE_HOST: Final = (
    "{slices} slices need multi-host slices, but {topology} is one {machine} host; {fix}"
)
TENSORFLOW_ELSEWHERE: Final = (
    "'{image}' is the TensorFlow trainer, and TensorFlow does not run on {type} (Cloud TPU's TPU7x page: JAX "
    "and PyTorch only); use a JAX or PyTorch/XLA image that reads the worker env the operator sets"
)

# spec.capacity and spec.nodePool
RESERVATION_REQUIRED: Final = (
    "required when mode is reservation: the reservation's name, or projects/PROJECT/reservations/NAME for "
    "one shared from another project"
)
RESERVATION_UNUSED: Final = (
    "only used when mode is reservation (mode is {mode}); remove it or set mode: reservation"
)
RUN_DURATION_UNUSED: Final = (
    "only used when mode is flexStart (mode is {mode}); remove it or set mode: flexStart"
)
FLEX_START_TYPE: Final = (
    "flexStart offers {types} TPUs, not {type} (GKE flex-start); use mode spot, reservation or onDemand"
)
ONLY_WITH_CREATE: Final = "only used with policy create; remove it"
OAUTH_SCOPES_ARE_THE_OPERATORS: Final = (
    "node pools' OAuth scopes are the operator's setting (the chart's gke.nodeOAuthScopes), not a job's; "
    "remove it, and give the trainer Google access through Workload Identity "
    "(spec.trainer.serviceAccountName)"
)
ZONE_AND_ZONES: Final = "set either spec.nodePool.zone (one zone) or spec.capacity.zones, not both"
WORKLOAD_POLICY_NEEDED: Final = (
    "multi-host {type} pools are placed by a workload policy: name one "
    "(gcloud compute resource-policies create workload-policy ... --type=HIGH_THROUGHPUT)"
)
WORKLOAD_POLICY_UNUSED: Final = (
    "only used for multi-host tpu7x pools made by the operator (policy create); remove it"
)

# spec.runPolicy.failurePolicy
ONE_MATCHER: Final = (
    "set exactly one of onExitCodes or onPodConditions ({given} given); write one rule per matcher"
)
EXIT_CODE_ZERO: Final = (
    "0 is not allowed with operator In: exit code 0 is success and never matches; remove it"
)
EXIT_CODES_REPEATED: Final = "{codes} listed more than once; list each exit code once"

# spec.trainer and spec.pod
ENV_RESERVED: Final = (
    "{name} is set by the operator (TPU_*, MEGASCALE_* and the TPUJOB_* of the README's env contract are the "
    "worker env it gives every worker); {fix}"
)
ENV_PREFIX_RESERVED: Final = (
    "'{prefix}' would name variables TPU_* or MEGASCALE_*, which the operator and libtpu own; "
    "choose another prefix"
)
TPU_ON_TRAINER: Final = "{resource} is set by the operator from the topology; remove it"
TPU_ON_SIDECAR: Final = "{resource} is the trainer's: every chip of the host goes to it; remove it"
CONTAINER_NAME_TWICE: Final = "{name} names two containers; container names are unique in the pod"
TRAINER_NAME_TAKEN: Final = "{name} is the trainer's container; name it otherwise"
OPERATOR_PORT: Final = (
    "{port} is the trainer's {what} port, and the pod's containers share one network; the operator's ports "
    "are {ports}"
)
VALUE_AND_VALUE_FROM: Final = "set value or valueFrom, not both"
NO_SUCH_VOLUME: Final = "{name} names no volume in spec.pod.volumes ({volumes}); add it there"
RELATIVE_PATH: Final = "'{path}' must be a relative path without '..'"
NO_ESCALATION_BUT_PRIVILEGED: Final = (
    "allowPrivilegeEscalation false and privileged true cannot go together; drop one"
)
NO_ESCALATION_BUT_SYS_ADMIN: Final = (
    "allowPrivilegeEscalation false and adding CAP_SYS_ADMIN cannot go together; drop one"
)
OPERATOR_KEYS: Final = "{owned} are the operator's: it finds its pods by them; use a key of your own"
OPERATOR_NODE_LABEL: Final = "the operator selects {key} from {field}; set that instead"
OPERATOR_TAINT: Final = "{key}: {why}; remove it"
QUALIFIED_KEY: Final = (
    "'{key}' is not a valid {what} key: an optional DNS subdomain and '/', then at most 63 letters, digits, "
    "'-', '_' or '.', alphanumeric at both ends"
)
TOLERATION_WITHOUT_KEY: Final = (
    "a toleration without a key tolerates every taint, other teams' pools included; name the taint's key"
)
OPERATOR_TAINT_PREFIX: Final = (
    "tpujob.dev/* taints are the operator's: each pool it makes is tainted for its own job's pods, which it "
    "tolerates itself; remove it"
)
OPERATOR_NODE_LABEL_PREFIX: Final = (
    "the operator's node labels (tpujob.dev/*, tpujob-*) belong to its jobs' own pools, and a job may not "
    "select another job's nodes; remove {keys}"
)
UNCONFINED_PROFILE: Final = (
    "an unconfined seccomp or AppArmor profile lifts the kernel's guard on a node other teams share (the "
    "operator keeps seccomp RuntimeDefault on every container); remove {keys}"
)
EXISTS_WITH_VALUE: Final = "operator Exists takes no value; remove it or use Equal"
SECONDS_WITHOUT_NO_EXECUTE: Final = "only used with effect NoExecute"
GCSFUSE_ANNOTATION: Final = (
    'Cloud Storage FUSE volumes need the pod annotation {annotation}: "true" (GKE injects the gcsfuse '
    "sidecar by it); add it to spec.pod.annotations"
)


def exactly_one(names: Sequence[str]) -> str:
    """Kubernetes takes one source where it lists several (an env var's valueFrom, a volume)."""
    return f"set exactly one of {', '.join(names[:-1])} or {names[-1]}"
