"""The TPUJob CustomResourceDefinition, generated from the pydantic models.

pydantic emits JSON Schema (with $refs, anyOf-null and titles); Kubernetes wants a structural
OpenAPI v3 schema (inline, every node typed). `structural()` does that translation.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tpujob.api import constants as c
from tpujob.api import messages as m
from tpujob.api.base import ApiModel
from tpujob.api.cel import rules_for
from tpujob.api.cel_text import FORBIDDEN, INVALID, CelRule, cel_format, lit
from tpujob.api.job import MAX_JOB_NAME_LENGTH
from tpujob.api.spec import TPUJobSpec
from tpujob.api.status import Phase, TPUJobStatus

_DROPPED_KEYS = {"title"}


def _models() -> dict[str, type[ApiModel]]:
    """$defs name (the class name) -> the model."""
    found: dict[str, type[ApiModel]] = {}
    pending: list[type[ApiModel]] = [ApiModel]
    while pending:
        model = pending.pop()
        pending.extend(model.__subclasses__())
        found[model.__name__] = model
    return found


def _add_rules(node: dict[str, Any], rules: tuple[CelRule, ...]) -> None:
    node["x-kubernetes-validations"] = [
        *node.get("x-kubernetes-validations", []),
        *(rule.to_schema() for rule in rules),
    ]


def with_rules(node: dict[str, Any], model: type[ApiModel]) -> dict[str, Any]:
    """A model's converted schema with the CEL rules of cel.py: on the object, a property or its items."""
    for place, rules in rules_for(model):
        target = node if not place.field else node["properties"][place.field]
        _add_rules(target["items"] if place.items else target, rules)
    return node


def structural(schema: dict[str, Any], model: type[ApiModel] | None = None) -> dict[str, Any]:
    """Inline $refs, fold Optional (anyOf with null) and attach CEL rules: a structural schema. `model` is
    the schema's own (its root's rules)."""
    defs = schema.get("$defs", {})
    models = _models()

    def convert(node: Any) -> Any:
        if isinstance(node, list):
            return [convert(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            target = convert(copy.deepcopy(defs[name]))
            if name in models:  # not an enum
                target = with_rules(target, models[name])
            extra = {k: convert(v) for k, v in node.items() if k != "$ref" and k not in _DROPPED_KEYS}
            return {**target, **extra}
        if "anyOf" in node:
            options = [o for o in node["anyOf"] if o.get("type") != "null"]
            if len(options) == 1:
                rest = {k: v for k, v in node.items() if k != "anyOf" and k not in _DROPPED_KEYS}
                if rest.get("default", "") is None:
                    del rest["default"]
                return {**convert(options[0]), **{k: convert(v) for k, v in rest.items()}}
        # additionalProperties: false beside properties is not structural; the API server prunes
        # unknown fields instead, and kubectl's schema validation reports them.
        if node.get("additionalProperties") is False:
            node = {k: v for k, v in node.items() if k != "additionalProperties"}
        # An empty-string default says nothing a missing field does not, and 1.20 API servers reject it.
        if node.get("default") == "":
            node = {k: v for k, v in node.items() if k != "default"}
        # A one-value Literal is JSON Schema's const, which Kubernetes' schemas lack: an enum instead.
        if "const" in node:
            node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
        return {k: convert(v) for k, v in node.items() if k not in _DROPPED_KEYS and k != "$defs"}

    result = convert(schema)
    assert isinstance(result, dict)
    return with_rules(result, model) if model is not None else result


# The descriptions Kubernetes gives TypeMeta (k8s.io/apimachinery), as controller-gen copies them into every
# CRD. metadata stays bare but for name (the API server refuses anything there but name and generateName),
# and the server describes it itself (ObjectMeta) in the OpenAPI document `kubectl explain` reads.
_CONVENTIONS = "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. "
    f"More info: {_CONVENTIONS}#resources"
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this "
    "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. "
    f"More info: {_CONVENTIONS}#types-kinds"
)


def openapi_schema() -> dict[str, Any]:
    spec = structural(TPUJobSpec.model_json_schema(by_alias=True, mode="validation"), TPUJobSpec)
    status = structural(TPUJobStatus.model_json_schema(by_alias=True, mode="serialization"))
    status.pop("required", None)  # the operator fills status in stages
    return {
        "type": "object",
        "description": "A TPU training job on GKE: TPU slices, capacity, trainer and failure policy.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": _API_VERSION_DESCRIPTION},
            "kind": {"type": "string", "description": _KIND_DESCRIPTION},
            # name is declared for the rule's fieldPath below (a fieldPath must name a field of the schema).
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [
            CelRule(
                rule=f"self.metadata.name.size() <= {MAX_JOB_NAME_LENGTH}",
                message=m.NAME_TOO_LONG.format(name="metadata.name", max=MAX_JOB_NAME_LENGTH),
                message_expression=cel_format(
                    m.NAME_TOO_LONG, name="self.metadata.name", max=lit(str(MAX_JOB_NAME_LENGTH))
                ),
                field_path=".metadata.name",
                reason=INVALID,
            ).to_schema(),
            *(rule.to_schema() for rule in shape_rules()),
        ],
    }


def shape_rules() -> tuple[CelRule, ...]:
    """A running job's shape is fixed (status/shape.py): transition rules on the object (they read the
    stored status), one per field so the refusal names it. Open while the job has no phase, or is Pending
    or Queued (Kueue evicted it: it holds nothing). The queue label is the operator's to hold: CEL cannot
    read labels."""
    open_phases = ", ".join(lit(str(phase)) for phase in (Phase.PENDING, Phase.QUEUED))
    is_open = f"!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase in [{open_phases}]"
    return tuple(
        CelRule(
            rule=f"{is_open} || (has(self.spec.{field}) == has(oldSelf.spec.{field}) && "
            f"(!has(self.spec.{field}) || self.spec.{field} == oldSelf.spec.{field}))",
            message=m.SHAPE_FIXED,
            field_path=f".spec.{field}",
            reason=FORBIDDEN,
        )
        for field in ("tpu", "capacity", "nodePool")
    )


# `kubectl get tpujob` (the category, which kubectl expands before it reads resource names) lists this
# project's kinds. Not in `all`, as Kubeflow's training jobs and JobSet are not: `kubectl get all` stays
# the built-in workloads (and does not fail for users who may not list TPUJobs). Only TPUJob may join
# this category: it shares the singular's name, so another kind in it would turn `kubectl get tpujob NAME`
# into a lookup of NAME in every kind of the category.
CATEGORIES = ("tpujob",)

PRINTER_COLUMNS = [
    {"name": "Type", "type": "string", "jsonPath": ".spec.tpu.type", "description": "TPU generation"},
    {"name": "Topology", "type": "string", "jsonPath": ".spec.tpu.topology", "description": "Slice topology"},
    {"name": "Slices", "type": "integer", "jsonPath": ".spec.tpu.slices", "description": "Number of slices"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Life-cycle phase"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "description": "All restarts"},
    {
        "name": "ClusterQueue",
        "type": "string",
        "jsonPath": ".status.queue.clusterQueue",
        "description": "Kueue: the ClusterQueue the job waits in or was admitted by",
    },
    {
        "name": "Queue",
        "type": "string",
        "jsonPath": ".status.queue.summary",
        "description": "Kueue: a queued job's position (where known) and estimated start",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.reason",
        "description": "Why the job is in its phase (Stockout, ErrImagePull, BackoffLimitExceeded, ...)",
    },
    {
        "name": "Progress",
        "type": "integer",
        "jsonPath": ".status.progress.percent",
        "description": "Training progress in percent, read while the trainer runs",
    },
    {
        "name": "ETA",
        "type": "string",
        "jsonPath": ".status.progress.eta",
        "description": "When training should end, at its recent pace",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Message",
        "type": "string",
        "jsonPath": ".status.message",
        "description": "Why the job is in its phase, in words (Kueue's, while it is queued)",
        "priority": 1,
    },
]


def without_cel(node: Any) -> Any:
    """The schema for API servers before 1.25, which reject x-kubernetes-validations."""
    if isinstance(node, list):
        return [without_cel(n) for n in node]
    if isinstance(node, dict):
        return {k: without_cel(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    return node


def crd(*, cel: bool = True) -> dict[str, Any]:
    schema = openapi_schema() if cel else without_cel(openapi_schema())
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {"app.kubernetes.io/name": "tpujob-operator", "app.kubernetes.io/part-of": "tpujob"},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml(*, cel: bool = True) -> str:
    header = (
        "# GENERATED by `tpujob crd` (make generate) from the models in operator/tpujob/api/ (spec.py, "
        "status.py). Do not edit.\n"
    )
    return header + yaml.safe_dump(crd(cel=cel), sort_keys=False, width=100)
