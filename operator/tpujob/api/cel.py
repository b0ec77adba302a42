"""The CRD's CEL rules (x-kubernetes-validations), by where they sit: the operator's own checks
(validation.py, pod_validation.py) said again for the API server, so a bad TPUJob is refused at
`kubectl apply` with the operator's field path and words. The operator keeps its checks for objects stored
before a rule existed.

A rule sits as low as it can: on a list's items when it judges one item (the API server reports the item's
path, index and all; a fieldPath takes none), on the one object or map it reads otherwise. That also keeps
ratcheting useful: Kubernetes skips a rule whose value is unchanged on update, so only a rule across parts
of the spec (on spec itself) re-judges an object whose other parts changed; every such rule restates a check
the operator already makes, so an object that breaks it was already refused as InvalidSpec.

Cost: the API server estimates each rule's cost from the schema's bounds (maxItems, maxLength,
maxProperties) and refuses a CRD over its budget; every list and string these rules walk is bounded in the
models, and messages join only strings of a known length (cel_text).
"""

from __future__ import annotations

from dataclasses import dataclass

from tpujob.api import constants as c
from tpujob.api import messages as m
from tpujob.api.base import QUALIFIED_NAME_PATTERN, ApiModel
from tpujob.api.cel_catalog import spec_rules, tpu_rules
from tpujob.api.cel_text import FORBIDDEN, INVALID, REQUIRED, CelRule, any_of, cel_format, lit
from tpujob.api.pod import (
    Container,
    ContainerPort,
    ContainerSecurityContext,
    EnvFromSource,
    EnvVar,
    EnvVarSource,
    Toleration,
    VolumeMount,
    WorkerPodSpec,
)
from tpujob.api.pod_validation import (
    ENV_SETTINGS,
    OPERATOR_ANNOTATIONS_OWNED,
    OPERATOR_LABEL_PREFIX,
    OPERATOR_LABELS_OWNED,
    OPERATOR_NODE_LABEL_PREFIXES,
    OPERATOR_NODE_LABELS,
    OPERATOR_PORT_LIST,
    OPERATOR_PORTS,
    OPERATOR_TAINTS,
    PROFILE_ANNOTATION_PREFIXES,
    PROFILE_ANNOTATIONS,
    RESERVED_ENV_PREFIXES,
    UNCONFINED,
    USER_TPU_ENV,
)
from tpujob.api.run_policy import FailurePolicyRule, OnExitCodes
from tpujob.api.spec import CapacitySpec, NodePoolSpec, TPUJobSpec, TPUSpec, TrainerSpec
from tpujob.api.trainer_contract import OPERATOR_TPUJOB_ENV
from tpujob.api.volumes import KeyToPath, Volume


@dataclass(frozen=True)
class Place:
    """Where rules sit: a model's object, one of its properties (by wire name), or that list's items."""

    model: type[ApiModel]
    field: str = ""
    items: bool = False


def _exactly_one(*names: str) -> CelRule:
    present = ", ".join(f"has(self.{name})" for name in names)
    return CelRule(
        rule=f"[{present}].filter(x, x).size() == 1", message=m.exactly_one(names), reason=REQUIRED
    )


def _relative(field: str) -> CelRule:
    """pod_validation._relative_path_problem: no leading '/', no '..' segment."""
    value = f"self.{field}"
    return CelRule(
        rule=f"!has({value}) || !({value}.startsWith('/') || {value} == '..' || {value}.startsWith('../') || "
        f"{value}.endsWith('/..') || {value}.contains('/../'))",
        message="must be a relative path without '..'",
        message_expression=cel_format(m.RELATIVE_PATH, path=value),
        field_path=f".{field}",
    )


def _no_tpu(template: str) -> tuple[CelRule, ...]:
    return tuple(
        CelRule(
            rule=f"!has(self.{section}) || !({lit(c.TPU_RESOURCE)} in self.{section})",
            message=template.format(resource=c.TPU_RESOURCE),
            field_path=f".{section}",
            reason=FORBIDDEN,
        )
        for section in ("requests", "limits")
    )


def _reserved_env(name: str) -> str:
    """pod_validation.env_reserved."""
    prefixed = any_of(*(f"{name}.startsWith({lit(prefix)})" for prefix in RESERVED_ENV_PREFIXES))
    return any_of(
        f"{name} in {lit(sorted(OPERATOR_TPUJOB_ENV))}",
        f"({prefixed} && !({name} in {lit(sorted(USER_TPU_ENV))}))",
    )


def _mounts_named(mounts: str, volumes: str, volumes_present: str) -> str:
    """Every mount in `mounts` names a volume of `volumes`. Written with `||`/`&&` guards, never
    `has(x) ? x : []` or a list literal: the API server's cost estimate knows no size for a list out of a
    conditional or a literal, and prices it as the whole request (the CRD was refused, "exceeds budget by
    factor of more than 100x")."""
    return f"{mounts}.all(x, {volumes_present} && x.name in {volumes}.map(v, v.name))"


def _missing_volume(
    lists: str, lists_present: str, mounted: str, volumes: str, volumes_present: str
) -> CelRule:
    """Every mount of the containers in `lists` names a volume of `volumes` (pod_validation's
    _missing_volume_problems); `mounted` is where the rule reports."""
    named = _mounts_named("ct.volumeMounts", volumes, volumes_present)
    return CelRule(
        rule=f"!({lists_present}) || {lists}.all(ct, !has(ct.volumeMounts) || {named})",
        # Static: a mount's name taken out of the list has no length the cost estimate knows (cel_text).
        message=m.NO_SUCH_VOLUME.format(name="a volume mount", volumes="see spec.pod.volumes"),
        field_path=mounted,
        reason=INVALID,
    )


def _operator_keys(owned: str, *, prefix: str, names: tuple[str, ...] = ()) -> CelRule:
    """No key of the map is the operator's; static, as a map key has no length the cost estimate knows."""
    theirs = any_of(f"k.startsWith({lit(prefix)})", *(f"k == {lit(name)}" for name in names))
    return CelRule(
        rule=f"self.all(k, !{theirs})", message=m.OPERATOR_KEYS.format(owned=owned), reason=FORBIDDEN
    )


def _node_selector() -> tuple[CelRule, ...]:
    """One rule per node label the operator selects on, each naming the field that decides it."""
    return tuple(
        CelRule(
            rule=f"!({lit(key)} in self)",
            message=m.OPERATOR_NODE_LABEL.format(key=key, field=field),
            reason=FORBIDDEN,
        )
        for key, field in OPERATOR_NODE_LABELS.items()
    )


def _no_unconfined_profile() -> CelRule:
    """pod_validation.unconfined: no annotation lifts a seccomp or AppArmor profile."""
    profile = any_of(
        *(f"k == {lit(key)}" for key in PROFILE_ANNOTATIONS),
        *(f"k.startsWith({lit(prefix)})" for prefix in PROFILE_ANNOTATION_PREFIXES),
    )
    return CelRule(
        rule=f"self.all(k, !({profile} && self[k] == {lit(UNCONFINED)}))",
        message=m.UNCONFINED_PROFILE.format(keys="them"),
        reason=FORBIDDEN,
    )


def _pod_rules() -> dict[Place, tuple[CelRule, ...]]:
    gcsfuse = c.GCSFUSE_VOLUMES_ANNOTATION
    no_escalation = "has(self.allowPrivilegeEscalation) && !self.allowPrivilegeEscalation"
    return {
        Place(TrainerSpec, "env", items=True): (
            CelRule(
                rule=f"!{_reserved_env('self.name')}",
                message=m.ENV_RESERVED.format(name="this name", fix="remove it"),
                message_expression=cel_format(
                    m.ENV_RESERVED,
                    name="self.name",
                    fix=f"self.name in {lit(ENV_SETTINGS)} ? "
                    f"'set ' + {lit(ENV_SETTINGS)}[self.name] + ' instead'"
                    " : 'remove it'",
                ),
                field_path=".name",
                reason=FORBIDDEN,
            ),
        ),
        Place(TrainerSpec, "envFrom", items=True): (
            CelRule(
                rule="!has(self.prefix) || self.prefix == '' || !"
                + any_of(
                    *(
                        f"self.prefix.startsWith({lit(p)}) || {lit(p)}.startsWith(self.prefix)"
                        for p in RESERVED_ENV_PREFIXES
                    )
                ),
                message=m.ENV_PREFIX_RESERVED.format(prefix="this prefix"),
                message_expression=cel_format(m.ENV_PREFIX_RESERVED, prefix="self.prefix"),
                field_path=".prefix",
                reason=FORBIDDEN,
            ),
        ),
        Place(TrainerSpec, "resources"): _no_tpu(m.TPU_ON_TRAINER),
        Place(Container, "resources"): _no_tpu(m.TPU_ON_SIDECAR),
        Place(Container): (
            CelRule(
                rule=f"self.name != {lit(c.TRAINER_CONTAINER)}",
                message=m.TRAINER_NAME_TAKEN.format(name=c.TRAINER_CONTAINER),
                field_path=".name",
                reason=INVALID,
            ),
        ),
        Place(ContainerPort): (
            CelRule(
                rule=f"!(self.containerPort in {lit(list(OPERATOR_PORTS))})",
                message=f"the trainer's ports are taken; the operator's ports are {OPERATOR_PORT_LIST}",
                message_expression=cel_format(
                    m.OPERATOR_PORT,
                    port=f"{lit({port: str(port) for port in OPERATOR_PORTS})}[self.containerPort]",
                    what=f"{lit(OPERATOR_PORTS)}[self.containerPort]",
                    ports=lit(OPERATOR_PORT_LIST),
                ),
                field_path=".containerPort",
                reason=FORBIDDEN,
            ),
        ),
        Place(EnvVar): (
            CelRule(rule="!(has(self.value) && has(self.valueFrom))", message=m.VALUE_AND_VALUE_FROM),
        ),
        Place(EnvVarSource): (
            _exactly_one("secretKeyRef", "configMapKeyRef", "fieldRef", "resourceFieldRef"),
        ),
        Place(EnvFromSource): (_exactly_one("secretRef", "configMapRef"),),
        Place(Volume): (_exactly_one("emptyDir", "secret", "configMap", "persistentVolumeClaim", "csi"),),
        Place(VolumeMount): (_relative("subPath"),),
        Place(KeyToPath): (_relative("path"),),
        Place(ContainerSecurityContext): (
            CelRule(
                rule=f"!({no_escalation} && has(self.privileged) && self.privileged)",
                message=m.NO_ESCALATION_BUT_PRIVILEGED,
            ),
            CelRule(
                rule=f"!({no_escalation} && has(self.capabilities) && has(self.capabilities.add) && "
                "'CAP_SYS_ADMIN' in self.capabilities.add)",
                message=m.NO_ESCALATION_BUT_SYS_ADMIN,
            ),
        ),
        Place(Toleration): (
            CelRule(
                rule=f"!has(self.key) || !(self.key in {lit(OPERATOR_TAINTS)})",
                message="the operator tolerates this taint itself; remove it",
                message_expression=cel_format(
                    m.OPERATOR_TAINT, key="self.key", why=f"{lit(OPERATOR_TAINTS)}[self.key]"
                ),
                field_path=".key",
                reason=FORBIDDEN,
            ),
            CelRule(
                # pod_validation._qualified_name_problems: the pattern, a name of at most 63 characters after
                # the last '/', a prefix of at most 253 before it.
                rule="!has(self.key) || self.key == '' || "
                f"(self.key.matches({lit(QUALIFIED_NAME_PATTERN)}) && "
                "self.key.size() - self.key.lastIndexOf('/') - 1 <= 63 && self.key.lastIndexOf('/') <= 253)",
                message=m.QUALIFIED_KEY.format(key="this key", what="toleration"),
                message_expression=cel_format(m.QUALIFIED_KEY, key="self.key", what=lit("toleration")),
                field_path=".key",
            ),
            CelRule(
                rule="has(self.key) && self.key != ''",
                message=m.TOLERATION_WITHOUT_KEY,
                field_path=".key",
                reason=REQUIRED,
            ),
            CelRule(
                rule=f"!has(self.key) || !self.key.startsWith({lit(OPERATOR_LABEL_PREFIX)})",
                message=m.OPERATOR_TAINT_PREFIX,
                field_path=".key",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule="!(has(self.operator) && self.operator == 'Exists' && has(self.value) && "
                "self.value != '')",
                message=m.EXISTS_WITH_VALUE,
                field_path=".value",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                message=m.SECONDS_WITHOUT_NO_EXECUTE,
                field_path=".tolerationSeconds",
                reason=FORBIDDEN,
            ),
        ),
        Place(WorkerPodSpec, "labels"): (
            _operator_keys(OPERATOR_LABELS_OWNED, prefix=OPERATOR_LABEL_PREFIX, names=(c.LABEL_MANAGED_BY,)),
        ),
        Place(WorkerPodSpec, "annotations"): (
            _operator_keys(OPERATOR_ANNOTATIONS_OWNED, prefix=OPERATOR_LABEL_PREFIX),
            _no_unconfined_profile(),
        ),
        Place(WorkerPodSpec, "nodeSelector"): (
            *_node_selector(),
            CelRule(
                rule="self.all(k, !"
                + any_of(*(f"k.startsWith({lit(prefix)})" for prefix in OPERATOR_NODE_LABEL_PREFIXES))
                + ")",
                # Static: a map key has no length the cost estimate knows (cel_text).
                message=m.OPERATOR_NODE_LABEL_PREFIX.format(keys="them"),
                reason=FORBIDDEN,
            ),
        ),
        Place(WorkerPodSpec): (
            CelRule(
                rule=f"!has(self.volumes) || !self.volumes.exists(v, has(v.csi) && v.csi.driver == "
                f"{lit(c.GCSFUSE_CSI_DRIVER)}) || (has(self.annotations) && "
                f"{lit(gcsfuse)} in self.annotations "
                f"&& self.annotations[{lit(gcsfuse)}] == 'true')",
                message=m.GCSFUSE_ANNOTATION.format(annotation=gcsfuse),
                field_path=".annotations",
                reason=REQUIRED,
            ),
            CelRule(
                rule="!has(self.containers) || !has(self.initContainers) || "
                "self.containers.all(ct, !self.initContainers.exists(i, i.name == ct.name))",
                message=m.CONTAINER_NAME_TWICE.format(name="a container and an init container: one name"),
                field_path=".containers",
                reason=INVALID,
            ),
            _missing_volume(
                "self.initContainers",
                "has(self.initContainers)",
                ".initContainers",
                "self.volumes",
                "has(self.volumes)",
            ),
            _missing_volume(
                "self.containers", "has(self.containers)", ".containers", "self.volumes", "has(self.volumes)"
            ),
        ),
    }


def _spec_rules() -> dict[Place, tuple[CelRule, ...]]:
    zones = "has(self.capacity) && has(self.capacity.zones) && self.capacity.zones.size() > 0"
    return {
        Place(TPUSpec): tpu_rules(),
        Place(CapacitySpec): (
            CelRule(
                rule="self.mode != 'reservation' || has(self.reservation)",
                message=m.RESERVATION_REQUIRED,
                field_path=".reservation",
                reason=REQUIRED,
            ),
            CelRule(
                rule="self.mode == 'reservation' || !has(self.reservation)",
                message=m.RESERVATION_UNUSED.format(mode="not reservation"),
                message_expression=cel_format(m.RESERVATION_UNUSED, mode="self.mode"),
                field_path=".reservation",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule="self.mode == 'flexStart' || !has(self.maxRunDurationSeconds)",
                message=m.RUN_DURATION_UNUSED.format(mode="not flexStart"),
                message_expression=cel_format(m.RUN_DURATION_UNUSED, mode="self.mode"),
                field_path=".maxRunDurationSeconds",
                reason=FORBIDDEN,
            ),
        ),
        Place(NodePoolSpec): (
            CelRule(
                rule="self.policy != 'existing' || !has(self.zone)",
                message=m.ONLY_WITH_CREATE,
                field_path=".zone",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule="!has(self.oauthScopes)",
                message=m.OAUTH_SCOPES_ARE_THE_OPERATORS,
                field_path=".oauthScopes",
                reason=FORBIDDEN,
            ),
        ),
        Place(TPUJobSpec): (
            *spec_rules(),
            CelRule(
                rule=f"!({zones} && has(self.nodePool) && self.nodePool.policy == 'existing')",
                message=m.ONLY_WITH_CREATE,
                field_path=".capacity.zones",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule=f"!({zones} && has(self.nodePool) && has(self.nodePool.zone))",
                message=m.ZONE_AND_ZONES,
                field_path=".capacity.zones",
                reason=FORBIDDEN,
            ),
            CelRule(
                rule="!has(self.trainer.volumeMounts) || "
                + _mounts_named(
                    "self.trainer.volumeMounts", "self.pod.volumes", "has(self.pod) && has(self.pod.volumes)"
                ),
                # Static: a mount's name taken out of the list has no length the cost estimate knows.
                message=m.NO_SUCH_VOLUME.format(name="a volume mount", volumes="see spec.pod.volumes"),
                field_path=".trainer.volumeMounts",
                reason=INVALID,
            ),
        ),
        Place(FailurePolicyRule): (
            CelRule(
                rule="has(self.onExitCodes) != has(self.onPodConditions)",
                message=m.ONE_MATCHER.format(given="both or neither"),
                message_expression=cel_format(
                    m.ONE_MATCHER, given="has(self.onExitCodes) ? 'both' : 'neither'"
                ),
                reason=REQUIRED,
            ),
        ),
        Place(OnExitCodes): (
            CelRule(
                rule="self.operator == 'NotIn' || !(0 in self.values)",
                message=m.EXIT_CODE_ZERO,
                field_path=".values",
            ),
            CelRule(
                rule="self.values.all(v, self.values.exists_one(x, x == v))",
                message=m.EXIT_CODES_REPEATED.format(codes="an exit code"),
                field_path=".values",
            ),
        ),
    }


def rules_by_place() -> dict[Place, tuple[CelRule, ...]]:
    return {**_spec_rules(), **_pod_rules()}


def rules_for(model: type[ApiModel]) -> list[tuple[Place, tuple[CelRule, ...]]]:
    """The places of `model` (its own, or its base classes': an InitContainer is a Container), with their
    rules."""
    return [(place, rules) for place, rules in rules_by_place().items() if place.model in model.__mro__]
