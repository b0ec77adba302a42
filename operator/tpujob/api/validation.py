"""Turn an untrusted manifest into a TPUJob, or into problems that name the field and the fix."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from tpujob import tpu
from tpujob.api import messages as m
from tpujob.api.base import DNS_LABEL_PATTERN, DNS_SUBDOMAIN_PATTERN, QUANTITY_PATTERN, ApiModel, Problem
from tpujob.api.job import MAX_JOB_NAME_LENGTH, TPUJob
from tpujob.api.pod_validation import OPERATOR_FIELDS, pod_problems
from tpujob.api.run_policy import ExitCodeOperator
from tpujob.api.spec import (
    GCE_NAME_PATTERN,
    RESERVATION_PATTERN,
    ZONE_PATTERN,
    CapacityMode,
    NodePoolPolicy,
)
from tpujob.api.tenancy import NamespacePolicy, tenancy_problems, with_defaults

__all__ = [
    "DefaultZones",
    "InvalidTPUJob",
    "Problem",
    "is_default_trainer_image",
    "judge_spec",
    "parse_tpujob",
    "semantic_problems",
    "size_problems",
]

# The default trainer image (repository name); it is TensorFlow.
DEFAULT_TRAINER_REPOSITORY = "tpujob-trainer"


def is_default_trainer_image(image: str) -> bool:
    """`registry/path/tpujob-trainer:tag`: the last path segment names the repository."""
    repository = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return repository.startswith(DEFAULT_TRAINER_REPOSITORY)


@dataclass(frozen=True)
class DefaultZones:
    """Where the pools of a job that names no zone go (the operator's TPUJOB_GKE_ZONE, `render --zone`), and
    the setting to blame when none of them offers the job's TPU type. The pure core takes them as given."""

    zones: Sequence[str]
    setting: str  # what sets them, named in the problem: OPERATOR_ZONE_SETTING, "tpujob render --zone"


# What the operator's TPUJOB_GKE_ZONE is called in a problem: the chart value a user sets, and the variable.
OPERATOR_ZONE_SETTING = "the operator's zone (chart value gke.zone, env TPUJOB_GKE_ZONE)"


# The operator's cap on a job's TPU hosts (its pods), TPUJOB_MAX_HOSTS_PER_JOB's default, and its name in a
# problem. Twice the largest single slice GKE offers (tpu7x 16x24x24: 2,304 hosts) would be 4,608; the
# operator's memory was measured at 2,304 (README, "Bounded work per job").
DEFAULT_MAX_HOSTS_PER_JOB = 4096
MAX_HOSTS_SETTING = "the operator's TPUJOB_MAX_HOSTS_PER_JOB (chart value operator.maxHostsPerJob)"
# Linux refuses to exec a program whose environment holds one string longer than MAX_ARG_STRLEN (32 pages,
# 131072 bytes with its NUL; include/uapi/linux/binfmts.h; execve(2): E2BIG "Argument list too long"): a
# slice's host list must fit, or no worker starts.
MAX_ARG_STRLEN = 131072
# The longest host list variable: TPU_PROCESS_ADDRESSES (tpu7x multi-host), host:8471 by worker id.
_PROCESS_PORT_SUFFIX = len(":8471")


def host_list_bytes(job: TPUJob, hosts: int) -> int:
    """Bytes of the longest host-list variable a worker gets (`NAME=value` and its NUL), for the last slice:
    render/plan.py joins naming.worker_address, `<name>-s<slice>-w<worker>.<name>`, with commas."""
    name = job.metadata.name
    last_slice = job.spec.tpu.slices - 1
    per_host = 2 * len(name) + len(f"-s{last_slice}-w.")
    if job.spec.tpu.type == "tpu7x" and hosts > 1:
        per_host += _PROCESS_PORT_SUFFIX
        variable = "TPU_PROCESS_ADDRESSES="
    else:
        variable = "TPU_WORKER_HOSTNAMES="
    digits = sum(len(str(w)) for w in range(hosts))
    return len(variable) + hosts * per_host + digits + (hosts - 1) + 1


def size_problems(job: TPUJob, max_hosts: int, setting: str = MAX_HOSTS_SETTING) -> list[Problem]:
    """A job too large for the operator's cap on hosts, or whose slice's host list no worker could start
    with (MAX_ARG_STRLEN)."""
    spec = job.spec.tpu
    shape = tpu.resolve_slice(spec.type, spec.topology, spec.machine_type)
    hosts = shape.hosts * spec.slices
    if hosts > max_hosts:
        return [
            Problem(
                "spec.tpu",
                f"{spec.slices} slice(s) of {spec.type} {spec.topology} is {hosts} TPU hosts (one pod "
                f"each), above the {max_hosts} that {setting} allows; use fewer slices or a smaller "
                "topology, or ask the operator's administrator to raise the setting",
            )
        ]
    size = host_list_bytes(job, shape.hosts)
    if size > MAX_ARG_STRLEN:
        return [
            Problem(
                "metadata.name",
                f"each worker of a {spec.topology} slice gets its {shape.hosts} hosts' names in one "
                f"environment variable, {size} bytes with this job's name, above Linux's {MAX_ARG_STRLEN}-"
                "byte limit for one (MAX_ARG_STRLEN): no worker could start; shorten the job's name",
            )
        ]
    return []


class InvalidTPUJob(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


def parse_tpujob(
    manifest: Any, default_zones: DefaultZones | None = None, tenancy: NamespacePolicy | None = None
) -> TPUJob:
    """Validate a manifest (a dict as read from YAML or the API server) into a TPUJob. With
    `default_zones`, a job that names no zone is also checked against them; with `tenancy`, its namespace's
    policy judges it too, and completes it (api/tenancy.py)."""
    if not isinstance(manifest, Mapping):
        raise InvalidTPUJob([Problem("(document)", "a TPUJob must be a mapping with apiVersion, kind, spec")])
    body = {k: v for k, v in manifest.items() if k != "status"}  # status is the operator's, not input
    try:
        job = TPUJob.model_validate(body)
    except pydantic.ValidationError as error:
        raise InvalidTPUJob(sorted(set(_from_pydantic(error)))) from None
    problems = sorted(semantic_problems(job, default_zones))
    if tenancy is not None:
        problems = sorted({*problems, *tenancy_problems(job, tenancy)})
    if problems:
        raise InvalidTPUJob(problems)
    return job if tenancy is None else with_defaults(job, tenancy)


def judge_spec(
    manifest: Any,
    default_zones: DefaultZones | None,
    tenancy: NamespacePolicy,
    max_hosts: int = DEFAULT_MAX_HOSTS_PER_JOB,
) -> TPUJob:
    """A manifest judged as the operator judges it before anything of it is made (its pass, `tpujob validate`
    and `render`): the schema's rules, its namespace's tenancy policy, the cap on hosts. The job as the
    policy completes it, or InvalidTPUJob naming each field and the fix."""
    job = parse_tpujob(manifest, default_zones, tenancy)
    if too_large := size_problems(job, max_hosts):
        raise InvalidTPUJob(too_large)
    return job


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(document)"


def _model_at(loc: tuple[int | str, ...]) -> type[ApiModel] | None:
    """The model class that owns the field at loc (to list valid field names for a typo)."""
    model: Any = TPUJob
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for name, f in model.model_fields.items() if part in (name, f.alias)),
            None,
        )
        if field is None:
            return None
        model = _model_in(field.annotation)
        if model is None:
            return None
    return model if isinstance(model, type) and issubclass(model, ApiModel) else None


def _model_in(annotation: Any) -> type[ApiModel] | None:
    """The model in a field's type: X, X | None, list[X], list[X] | None ..."""
    if isinstance(annotation, type) and issubclass(annotation, ApiModel):
        return annotation
    return next(filter(None, (_model_in(arg) for arg in getattr(annotation, "__args__", ()))), None)


def _from_pydantic(error: pydantic.ValidationError) -> Iterator[Problem]:
    for item in error.errors():
        loc = tuple(item["loc"])
        kind = item["type"]
        given = item.get("input")
        if kind == "extra_forbidden":
            owner = _model_at(loc[:-1])
            names = ", ".join(f.alias or n for n, f in owner.model_fields.items()) if owner else ""
            operator_set = OPERATOR_FIELDS.get((owner, str(loc[-1]))) if owner else None
            if operator_set:
                yield Problem(_path(loc), operator_set)
            else:
                yield Problem(_path(loc), f"unknown field; valid fields here: {names}")
        elif kind == "missing":
            yield Problem(_path(loc), "required field is missing")
        elif kind == "enum":
            allowed = item.get("ctx", {}).get("expected", "")
            allowed = allowed.replace(" or ", ", ").replace("'", "")
            yield Problem(_path(loc), f"{given!r} is not allowed; valid: {allowed}")
        elif kind == "string_pattern_mismatch":
            yield Problem(_path(loc), _pattern_message(loc, given, item["ctx"]["pattern"]))
        elif kind == "string_too_long" and loc[-1] == "name" and loc[0] == "metadata":
            yield Problem(_path(loc), m.NAME_TOO_LONG.format(name=given, max=MAX_JOB_NAME_LENGTH))
        else:
            yield Problem(_path(loc), f"{item['msg']} (got {given!r})")


def _pattern_message(loc: tuple[int | str, ...], given: Any, pattern: str) -> str:
    field = loc[-1]
    if field == "topology":
        return f"{given!r} is not a topology; write dimensions joined by 'x', e.g. 2x2 or 2x2x4"
    if field == "apiVersion":
        return f"{given!r} is not served here; use {pattern.strip('^$')}"
    if field == "kind":
        return f"{given!r} is not handled here; use {pattern.strip('^$')}"
    if field == "name" and loc[0] == "metadata":
        return f"{given!r} must be a DNS label: lowercase letters, digits and '-', starting with a letter"
    if pattern == QUANTITY_PATTERN:
        return f"{given!r} does not match {pattern}: not a Kubernetes quantity; write e.g. 8, 500m or 64Gi"
    if pattern == DNS_LABEL_PATTERN:
        return f"{given!r} must be a DNS label: lowercase letters, digits and '-', alphanumeric at both ends"
    if pattern == DNS_SUBDOMAIN_PATTERN:
        return f"{given!r} must be a Kubernetes object name: lowercase letters, digits, '-' and '.'"
    if pattern == GCE_NAME_PATTERN:
        return f"{given!r} does not match {pattern}: a GCE name is lowercase letters, digits and '-'"
    if pattern == RESERVATION_PATTERN:
        return (
            f"{given!r} does not match {pattern}: write the reservation's name (lowercase letters, digits "
            "and '-'), or projects/PROJECT/reservations/NAME for one shared from another project"
        )
    return f"{given!r} does not match {pattern}"


# Flex-start's generations are the catalog's (tpu.FLEX_START_TYPES, with GKE's and xpk's word).
FLEX_START_TYPES = tpu.FLEX_START_TYPES


def _flex_start_problems(job: TPUJob, shape: tpu.SliceShape | None) -> Iterator[Problem]:
    capacity = job.spec.capacity
    if capacity.mode != CapacityMode.flex_start:
        if capacity.max_run_duration_seconds is not None:
            yield Problem(
                "spec.capacity.maxRunDurationSeconds", m.RUN_DURATION_UNUSED.format(mode=capacity.mode)
            )
        return
    if job.spec.tpu.type not in FLEX_START_TYPES:
        yield Problem(
            "spec.capacity.mode",
            m.FLEX_START_TYPE.format(types=", ".join(FLEX_START_TYPES), type=job.spec.tpu.type),
        )


def _failure_policy_problems(job: TPUJob) -> Iterator[Problem]:
    """spec.runPolicy.failurePolicy.rules: one matcher per rule, exit codes that can match, each once."""
    for index, rule in enumerate(job.spec.run_policy.failure_policy.rules or []):
        path = f"spec.runPolicy.failurePolicy.rules[{index}]"
        if (rule.on_exit_codes is None) == (rule.on_pod_conditions is None):
            given = "both" if rule.on_exit_codes is not None else "neither"
            yield Problem(path, m.ONE_MATCHER.format(given=given))
        codes = rule.on_exit_codes
        if codes is None:
            continue
        if codes.operator == ExitCodeOperator.in_ and 0 in codes.values:
            yield Problem(f"{path}.onExitCodes.values", m.EXIT_CODE_ZERO)
        repeated = sorted({code for code in codes.values if codes.values.count(code) > 1})
        if repeated:
            yield Problem(
                f"{path}.onExitCodes.values",
                m.EXIT_CODES_REPEATED.format(codes=", ".join(map(str, repeated))),
            )


def _default_zone_problems(
    job: TPUJob, shape: tpu.SliceShape | None, default_zones: DefaultZones | None
) -> Iterator[Problem]:
    """A job that names no zone goes to the default zones: one of them must offer its TPU type, or GKE
    refuses every pool (400 'Invalid machine type ... in zone'). Only zones are weighed: a setting that is
    not one (a region) is the cluster check's to report, naming the setting, for every job alike."""
    spec = job.spec
    if (
        default_zones is None
        or shape is None
        or spec.node_pool.policy != NodePoolPolicy.create
        or spec.node_pool.zone
        or spec.capacity.zones
    ):
        return
    zones = [z for z in default_zones.zones if re.match(ZONE_PATTERN, z)]
    if not zones or tpu.zones_offering(spec.tpu.type, zones):
        return
    if any(tpu.zone_problem(spec.tpu.type, zone) is None for zone in zones):
        return  # a zone the catalog does not know (or not for sure): GKE is asked, with a warning
    offers = "none of which offers" if len(zones) > 1 else "which does not offer"
    yield Problem(
        "spec.nodePool.zone",
        f"not set, so the pools go to {', '.join(zones)}, {default_zones.setting}, {offers} "
        f"{spec.tpu.type} TPUs; set spec.nodePool.zone or spec.capacity.zones to a zone of the cluster's "
        f"region that does, or change that setting; zones that offer {spec.tpu.type}: "
        f"{', '.join(tpu.ZONES.get(spec.tpu.type, ()))}",
    )


def multislice_fix(shape: tpu.SliceShape) -> str:
    """How to make a single-host slice fit Multislice."""
    four_chip = next((t.name for t in shape.generation.machine_types if t.chips_per_vm == 4), None)
    if four_chip and shape.chips > 4:  # 2x4 on v5e/v6e: two 4-chip hosts make it a multi-host slice
        return f"set spec.tpu.machineType: {four_chip} (2 hosts of 4 chips), a larger topology, or slices: 1"
    return "use a larger topology or slices: 1"


def multislice_problem(shape: tpu.SliceShape, slices: int | str) -> str:
    return m.MULTISLICE_OF_ONE_HOST.format(
        slices=slices, topology=shape.topology, machine=shape.machine_type.name, fix=multislice_fix(shape)
    )


def semantic_problems(job: TPUJob, default_zones: DefaultZones | None = None) -> Iterator[Problem]:
    """Rules across fields and against the TPU catalog (the schema alone cannot express them); with
    `default_zones`, where a job that names no zone would go."""
    spec = job.spec
    shape: tpu.SliceShape | None = None
    try:
        shape = tpu.resolve_slice(spec.tpu.type, spec.tpu.topology, spec.tpu.machine_type)
    except tpu.CatalogError as error:
        yield Problem(f"spec.tpu.{error.field}", error.message)

    if shape is not None and spec.tpu.slices > 1 and not shape.multi_host:
        yield Problem("spec.tpu.slices", multislice_problem(shape, spec.tpu.slices))
    if (
        shape is not None
        and not shape.generation.runs_tensorflow
        and is_default_trainer_image(spec.trainer.image)
    ):
        yield Problem(
            "spec.trainer.image", m.TENSORFLOW_ELSEWHERE.format(image=spec.trainer.image, type=spec.tpu.type)
        )

    capacity = spec.capacity
    if capacity.mode == CapacityMode.reservation and not capacity.reservation:
        yield Problem("spec.capacity.reservation", m.RESERVATION_REQUIRED)
    if capacity.mode != CapacityMode.reservation and capacity.reservation:
        yield Problem("spec.capacity.reservation", m.RESERVATION_UNUSED.format(mode=capacity.mode))

    yield from _flex_start_problems(job, shape)
    yield from _failure_policy_problems(job)

    pool = spec.node_pool
    if pool.policy == NodePoolPolicy.existing and pool.zone:
        yield Problem("spec.nodePool.zone", m.ONLY_WITH_CREATE)
    if pool.oauth_scopes is not None:
        yield Problem("spec.nodePool.oauthScopes", m.OAUTH_SCOPES_ARE_THE_OPERATORS)
    if pool.policy == NodePoolPolicy.existing and capacity.zones:
        yield Problem("spec.capacity.zones", m.ONLY_WITH_CREATE)
    if pool.zone and capacity.zones:
        yield Problem("spec.capacity.zones", m.ZONE_AND_ZONES)
    for path, zone in [
        ("spec.nodePool.zone", pool.zone),
        *((f"spec.capacity.zones[{i}]", z) for i, z in enumerate(capacity.zones)),
    ]:
        if zone and shape is not None and (problem := tpu.zone_problem(spec.tpu.type, zone)):
            yield Problem(path, problem)
    yield from _default_zone_problems(job, shape, default_zones)
    needs_policy = (
        shape is not None
        and shape.multi_host
        and shape.generation.multi_host_needs_workload_policy
        and pool.policy == NodePoolPolicy.create
    )
    if needs_policy and not pool.workload_policy:
        yield Problem("spec.nodePool.workloadPolicy", m.WORKLOAD_POLICY_NEEDED.format(type=spec.tpu.type))
    if pool.workload_policy and shape is not None and not needs_policy:
        yield Problem("spec.nodePool.workloadPolicy", m.WORKLOAD_POLICY_UNUSED)

    yield from pod_problems(spec)
