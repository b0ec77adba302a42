"""Every CEL rule of the generated CRD, run by Google's CEL (cel-expr-python) on realistic manifests.

The test bed's API server (Kubernetes 1.20) predates CEL, so nothing there ever runs the
`x-kubernetes-validations` of crds/tpujob.dev_tpujobs.yaml. Here each rule runs on the value a 1.25+ API
server would give it: `self` is the object at the rule's place in a TPUJob manifest, after the server has
pruned unknown fields and applied the schema's defaults. CASES holds, for every rule (keyed by its path
and text), manifests it must accept and manifests it must refuse with its message, and says where the
Python side (`parse_tpujob`: the pydantic model and its cross-field checks) refuses the same manifests.
A rule added to the CRD, or a rule's text changed, fails test_every_rule_of_the_crd_has_cases until it
has cases.

Kubernetes' CEL environment is standard CEL plus extension libraries
(https://kubernetes.io/docs/reference/using-api/cel/): cel-go's strings extension at version 2 from 1.29
(k8s.io/apiserver/pkg/cel/environment), and Kubernetes' own libraries (lists, regex, URLs, quantity, IP,
CIDR, format, semver). The rules today use only standard CEL: `has()`, `in`, `? :`, `size()` and
`matches()` (RE2, as in Kubernetes) are all in the CEL spec's standard definitions. A rule that calls a
Kubernetes-only function fails test_every_rule_compiles: add that function here as a cel.FunctionDecl
that behaves as Kubernetes' (cite its entry in the page above), or rewrite the rule in
operator/tpujob/api/.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import base_job
from tpujob.api import InvalidTPUJob, TPUJob, parse_tpujob

try:
    from cel_expr_python import cel
    from cel_expr_python.ext import ext_strings
except ImportError as error:  # a dev dependency, never optional: the rules would go unproven
    pytest.fail(
        f"cel-expr-python cannot be imported ({error}); it is a dev dependency that proves the CRD's "
        "CEL rules: pip install -e '.[dev]'",
        pytrace=False,
    )

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "tpujob.dev_tpujobs.yaml"
EXAMPLES = {path.name: path for path in sorted((ROOT / "examples").glob("*.yaml"))}


# --- The rules, as the CRD holds them ---------------------------------------------------------------


@dataclass(frozen=True)
class CrdRule:
    """One x-kubernetes-validations entry and where it sits: steps are property names, "[*]" (every
    item of a list) or "{*}" (every value of a map)."""

    steps: tuple[str, ...]
    rule: str
    message: str | None = None
    message_expression: str | None = None
    optional_old_self: bool = False

    @property
    def path(self) -> str:
        parts = [step if step == "[*]" else ".*" if step == "{*}" else f".{step}" for step in self.steps]
        return "$" + "".join(parts)

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.rule)

    @property
    def transition(self) -> bool:
        """A transition rule: Kubernetes runs it on updates only, with oldSelf the stored value."""
        return re.search(r"\boldSelf\b", self.rule) is not None


def _openapi_schema() -> dict[str, Any]:
    (document,) = yaml.safe_load_all(CRD_PATH.read_text())
    (version,) = document["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _rules_in(schema: dict[str, Any], steps: tuple[str, ...] = ()) -> list[CrdRule]:
    found = [
        CrdRule(
            steps=steps,
            rule=entry["rule"],
            message=entry.get("message"),
            message_expression=entry.get("messageExpression"),
            optional_old_self=entry.get("optionalOldSelf", False),
        )
        for entry in schema.get("x-kubernetes-validations", [])
    ]
    for name, child in schema.get("properties", {}).items():
        found += _rules_in(child, (*steps, name))
    if isinstance(schema.get("items"), dict):
        found += _rules_in(schema["items"], (*steps, "[*]"))
    if isinstance(schema.get("additionalProperties"), dict):
        found += _rules_in(schema["additionalProperties"], (*steps, "{*}"))
    return found


SCHEMA = _openapi_schema()
RULES = _rules_in(SCHEMA)
RULES_BY_KEY = {rule.key: rule for rule in RULES}


# --- The value the API server hands to CEL ----------------------------------------------------------


def as_stored(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as the API server validates it: JSON types (ints stay int64, maps and lists as
    such), unknown fields pruned, nulls of non-nullable fields dropped, then the schema's defaults
    applied to the objects present (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
    custom-resource-definitions/#defaulting). At the root, CEL sees only metadata.name and
    metadata.generateName (same page, "Validation rules")."""
    value = _stored(json.loads(json.dumps(manifest)), SCHEMA)
    metadata = manifest.get("metadata", {})
    value["metadata"] = {k: metadata[k] for k in ("name", "generateName") if k in metadata}
    return value


def _stored(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [_stored(item, schema.get("items", {})) for item in value]
    if not isinstance(value, dict):
        return value
    properties = schema.get("properties", {})
    values = schema.get("additionalProperties")
    stored: dict[str, Any] = {}
    for key, item in value.items():
        child = properties.get(key, values if isinstance(values, dict) else None)
        if child is None and not schema.get("x-kubernetes-preserve-unknown-fields"):
            continue  # pruned
        if item is None and not (child or {}).get("nullable"):
            continue
        stored[key] = _stored(item, child or {})
    for key, child in properties.items():
        if key not in stored and "default" in child:
            stored[key] = _stored(copy.deepcopy(child["default"]), child)
    return stored


def values_at(stored: Any, steps: tuple[str, ...]) -> list[Any]:
    """Every value a rule at `steps` runs on (none when the field is absent: the rule does not run)."""
    nodes = [stored]
    for step in steps:
        following: list[Any] = []
        for node in nodes:
            if step == "[*]" and isinstance(node, list):
                following += node
            elif step == "{*}" and isinstance(node, dict):
                following += node.values()
            elif isinstance(node, dict) and step in node:
                following.append(node[step])
        nodes = following
    return nodes


# --- Running a rule ---------------------------------------------------------------------------------


@functools.cache
def cel_env() -> Any:
    """Standard CEL and the strings extension at Kubernetes' version; self and oldSelf are dynamic, as
    the schema's types are not declared to this library."""
    return cel.NewEnv(
        variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN},
        extensions=[ext_strings.ExtStrings(version=2)],
    )


@functools.cache
def compiled(expression: str) -> Any:
    return cel_env().compile(expression)


def refusals(rule: CrdRule, manifest: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """The messages the API server would answer `manifest` with for this rule (none: accepted).
    `old` is the stored object on an update; transition rules do not run without it."""
    assert not rule.optional_old_self, f"{rule.path}: optionalOldSelf rules are not handled by this test"
    news = values_at(as_stored(manifest), rule.steps)
    if not rule.transition:
        pairs = [(new, None) for new in news]
    else:
        # Kubernetes correlates old and new values by property name (and by key in maps and map-lists);
        # this harness handles property paths only.
        assert not {"[*]", "{*}"} & set(rule.steps), f"{rule.path}: transition rule inside a list or map"
        olds = values_at(as_stored(old), rule.steps) if old is not None else []
        pairs = list(zip(news, olds, strict=False))
    messages = []
    for new, old_value in pairs:
        data = {"self": new} if old_value is None else {"self": new, "oldSelf": old_value}
        result = compiled(rule.rule).eval(data=data)
        assert result.type() == cel.Type.BOOL, (
            f"{rule.path}: {rule.rule!r} did not give a bool on {new!r} (the API server would refuse the "
            f"object with an evaluation error): {result.value()!r}"
        )
        if not result.value():
            messages.append(_message(rule, data))
    return messages


def _message(rule: CrdRule, data: dict[str, Any]) -> str:
    """messageExpression when it gives a usable string, else message, else "failed rule: <rule>" (the
    CRD API reference, ValidationRule)."""
    if rule.message_expression:
        result = compiled(rule.message_expression).eval(data=data)
        text = result.value() if result.type() == cel.Type.STRING else ""
        if text.strip() and "\n" not in text:
            return str(text)
    return rule.message or f"failed rule: {rule.rule}"


# --- The cases --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    manifest: dict[str, Any]
    old: dict[str, Any] | None = None  # for transition rules: the stored object being updated


@dataclass(frozen=True)
class RuleCases:
    message: str  # what the API server answers on refusal
    accept: tuple[Case, ...]
    refuse: tuple[Case, ...]
    # Where the Python side refuses the refused manifests: "model" (TPUJob.model_validate, a field
    # constraint), "semantic" (parse_tpujob's cross-field checks in validation.py; the model alone
    # accepts them) or "none: <why>" when it has no counterpart.
    pydantic: str
    problem_path: str = ""  # the field parse_tpujob's problem names


def example(name: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLES[name].read_text())
    return manifest


def job(name: str = "train", **spec: Any) -> dict[str, Any]:
    return base_job(name, **spec)


JAX_IMAGE = "us-docker.pkg.dev/my-project/trainers/maxtext:latest"
SHARED_RESERVATION = "projects/other-project/reservations/r-1"

TOPOLOGY_RULE = (
    "self.type in ['v5e', 'v6e'] ? self.topology.matches('^[0-9]+x[0-9]+$')"
    " : self.topology.matches('^[0-9]+x[0-9]+x[0-9]+$')"
)
RESERVATION_RULE = "self.mode == 'reservation' ? has(self.reservation) : !has(self.reservation)"
RUN_DURATION_RULE = "!has(self.maxRunDurationSeconds) || self.mode == 'flexStart'"
NAME_RULE = "self.metadata.name.size() <= 48"
ONE_MATCHER_RULE = "has(self.onExitCodes) != has(self.onPodConditions)"
NO_ZERO_IN_RULE = "self.operator == 'NotIn' || !(0 in self.values)"


def with_failure_rules(*rules: dict[str, Any]) -> dict[str, Any]:
    return job(runPolicy={"failurePolicy": {"rules": list(rules)}})


def exit_codes(operator: str, *values: int) -> dict[str, Any]:
    return {"operator": operator, "values": list(values)}


FAIL_ON_CONFIG = {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [2]}}
IGNORE_DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}

CASES: dict[tuple[str, str], RuleCases] = {
    ("$.spec.tpu", TOPOLOGY_RULE): RuleCases(
        message="topology must be AxB for v5e and v6e, AxBxC for v4, v5p and tpu7x",
        accept=(
            Case("v5e-2x2", example("v5e-single-host.yaml")),
            Case("v5e-1x1", example("digits-local.yaml")),
            Case("v6e-4x4", example("v6e-flex-start.yaml")),
            Case("v5p-2x2x4", example("v5p-multi-host.yaml")),
            Case("v4-2x2x2", example("v4-existing-pool.yaml")),
            Case(
                "tpu7x-2x2x2",
                job(
                    tpu={"type": "tpu7x", "topology": "2x2x2"},
                    nodePool={"workloadPolicy": "ironwood-wp"},
                    trainer={"image": JAX_IMAGE},
                ),
            ),
        ),
        refuse=(
            Case("v5e-3d", job(tpu={"type": "v5e", "topology": "2x2x1"})),
            Case("v6e-3d", job(tpu={"type": "v6e", "topology": "2x2x1"})),
            Case("v5p-2d", job(tpu={"type": "v5p", "topology": "2x2"})),
            Case("v4-2d", job(tpu={"type": "v4", "topology": "4x4"})),
            Case("tpu7x-2d", job(tpu={"type": "tpu7x", "topology": "2x2"})),
        ),
        pydantic="semantic",  # the pattern takes AxB and AxBxC; tpu.resolve_slice knows each generation
        problem_path="spec.tpu.topology",
    ),
    ("$.spec.capacity", RESERVATION_RULE): RuleCases(
        message="reservation is required when mode is reservation, and only then",
        accept=(
            Case("reservation-by-name", example("v6e-multislice.yaml")),
            Case(
                "shared-reservation",
                job(capacity={"mode": "reservation", "reservation": SHARED_RESERVATION}),
            ),
            Case("spot", example("v5p-multi-host.yaml")),
            Case("mode-defaulted-no-reservation", job(capacity={"zones": ["us-central1-a"]})),
        ),
        refuse=(
            Case("reservation-without-name", job(capacity={"mode": "reservation"})),
            Case("spot-with-reservation", job(capacity={"mode": "spot", "reservation": "r1"})),
            Case("flex-start-with-reservation", job(capacity={"mode": "flexStart", "reservation": "r1"})),
            # mode is absent: the API server defaults it to onDemand before the rule runs.
            Case("mode-defaulted-with-reservation", job(capacity={"reservation": "my-v5e-reservation"})),
        ),
        pydantic="semantic",
        problem_path="spec.capacity.reservation",
    ),
    ("$.spec.capacity", RUN_DURATION_RULE): RuleCases(
        message="maxRunDurationSeconds is only used with mode flexStart",
        accept=(
            Case("flex-start-with-duration", example("v6e-flex-start.yaml")),
            Case("flex-start-default-duration", job(capacity={"mode": "flexStart"})),
            Case("spot-without-duration", example("v5p-multi-host.yaml")),
        ),
        refuse=(
            Case("spot-with-duration", job(capacity={"mode": "spot", "maxRunDurationSeconds": 3600})),
            Case(
                "reservation-with-duration",
                job(capacity={"mode": "reservation", "reservation": "r1", "maxRunDurationSeconds": 86400}),
            ),
            # mode is absent: defaulted to onDemand.
            Case("mode-defaulted-with-duration", job(capacity={"maxRunDurationSeconds": 86400})),
        ),
        pydantic="semantic",
        problem_path="spec.capacity.maxRunDurationSeconds",
    ),
    ("$", NAME_RULE): RuleCases(
        message=(
            "metadata.name must be at most 48 characters (pod hostnames add a suffix and must fit in a "
            "DNS label)"
        ),
        accept=(
            Case("48-characters", job("n" * 48)),
            Case("example", example("v6e-multislice.yaml")),
        ),
        refuse=(
            Case("49-characters", job("n" * 49)),
            Case("realistic-long-name", job("llm-pretraining-v6e-multislice-2025-06-01-retry-3")),
        ),
        pydantic="model",  # ObjectMeta.name's max_length
        problem_path="metadata.name",
    ),
    ("$.spec.runPolicy.failurePolicy.rules[*]", ONE_MATCHER_RULE): RuleCases(
        message="set exactly one of onExitCodes or onPodConditions",
        accept=(
            Case("exit-codes", with_failure_rules(FAIL_ON_CONFIG)),
            Case("pod-conditions", with_failure_rules(IGNORE_DISRUPTION)),
            Case("one-of-each", with_failure_rules(IGNORE_DISRUPTION, FAIL_ON_CONFIG)),
        ),
        refuse=(
            Case("both", with_failure_rules({**FAIL_ON_CONFIG, **IGNORE_DISRUPTION, "action": "FailJob"})),
            Case("neither", with_failure_rules({"action": "Count"})),
        ),
        pydantic="semantic",
        problem_path="spec.runPolicy.failurePolicy.rules[0]",
    ),
    ("$.spec.runPolicy.failurePolicy.rules[*].onExitCodes", NO_ZERO_IN_RULE): RuleCases(
        message="0 is not allowed in an In list (exit code 0 is success and never matches); remove it",
        accept=(
            Case("in-without-zero", with_failure_rules(FAIL_ON_CONFIG)),
            Case(
                "not-in-with-zero",
                with_failure_rules({"action": "Ignore", "onExitCodes": exit_codes("NotIn", 0, 1)}),
            ),
        ),
        refuse=(
            Case(
                "in-with-zero",
                with_failure_rules({"action": "FailJob", "onExitCodes": exit_codes("In", 2, 0)}),
            ),
        ),
        pydantic="semantic",
        problem_path="spec.runPolicy.failurePolicy.rules[0].onExitCodes.values",
    ),
}


def label(key: tuple[str, str]) -> str:
    """A rule's short name for test ids: its path and its place among the rules there."""
    here = [rule.key for rule in RULES if rule.path == key[0]]
    return f"{key[0]}#{here.index(key) if key in here else '?'}"


def _cases(kind: str) -> list[Any]:
    return [
        pytest.param(key, case, id=f"{label(key)}:{case.name}")
        for key, table in CASES.items()
        for case in getattr(table, kind)
    ]


# --- The tests --------------------------------------------------------------------------------------


def test_the_walk_finds_every_rule_in_the_crd():
    def count(node: Any) -> int:
        if isinstance(node, list):
            return sum(count(item) for item in node)
        if not isinstance(node, dict):
            return 0
        here = len(node.get("x-kubernetes-validations", []))
        return here + sum(count(v) for k, v in node.items() if k != "x-kubernetes-validations")

    assert RULES, "the CRD has no CEL rules: is crds/tpujob.dev_tpujobs.yaml generated with cel=True?"
    assert len(RULES) == count(yaml.safe_load(CRD_PATH.read_text()))
    assert len(RULES_BY_KEY) == len(RULES), "two rules at one path with the same text"


def test_every_rule_of_the_crd_has_cases():
    missing = sorted(set(RULES_BY_KEY) - set(CASES))
    stale = sorted(set(CASES) - set(RULES_BY_KEY))
    assert not missing, f"CEL rules without cases in tests/unit/test_cel.py CASES: {missing}"
    assert not stale, f"CASES for rules no longer in the CRD (removed or reworded): {stale}"
    for key, table in CASES.items():
        assert table.accept and table.refuse, f"{key}: needs a manifest it accepts and one it refuses"
        if RULES_BY_KEY[key].transition:
            assert all(case.old is not None for case in table.refuse), f"{key}: a refusal needs `old`"
        assert table.pydantic in ("model", "semantic") or table.pydantic.startswith("none: "), key
        assert table.pydantic.startswith("none: ") or table.problem_path, key


@pytest.mark.parametrize("rule", RULES, ids=[label(r.key) for r in RULES])
def test_every_rule_compiles(rule):
    """Type-checked against standard CEL plus the strings extension: a function Kubernetes alone has
    is an 'undeclared reference' here."""
    for expression in filter(None, (rule.rule, rule.message_expression)):
        try:
            program = compiled(expression)
        except RuntimeError as error:
            problem = str(error)
        else:
            problem = ""
        assert not problem, (
            f"{rule.path}: {expression!r} does not compile with standard CEL and the strings extension "
            f"({problem}); add the Kubernetes function to this test or rewrite the rule"
        )
        wanted = cel.Type.BOOL if expression == rule.rule else cel.Type.STRING
        assert program.return_type() in (wanted, cel.Type.DYN), (expression, program.return_type().name())


@pytest.mark.parametrize(("key", "case"), _cases("accept"))
def test_rule_accepts(key, case):
    rule = RULES_BY_KEY[key]
    assert values_at(as_stored(case.manifest), rule.steps), f"{case.name}: nothing at {rule.path}"
    assert refusals(rule, case.manifest, case.old) == []
    # The manifest is valid as a whole: no other rule refuses it, and neither does parse_tpujob.
    assert {r.key: refusals(r, case.manifest, case.old) for r in RULES} == {r.key: [] for r in RULES}
    parse_tpujob(case.manifest)


@pytest.mark.parametrize(("key", "case"), _cases("refuse"))
def test_rule_refuses_with_its_message(key, case):
    rule = RULES_BY_KEY[key]
    assert refusals(rule, case.manifest, case.old) == [CASES[key].message]
    others = [r for r in RULES if r.key != key]
    assert {r.key: refusals(r, case.manifest, case.old) for r in others} == {r.key: [] for r in others}


@pytest.mark.parametrize(("key", "case"), _cases("refuse"))
def test_python_side_refuses_the_same_manifest(key, case):
    table = CASES[key]
    if table.pydantic.startswith("none: "):
        pytest.skip(table.pydantic)
    if table.pydantic == "model":
        with pytest.raises(ValueError):  # pydantic.ValidationError
            TPUJob.model_validate(case.manifest)
    else:
        TPUJob.model_validate(case.manifest)  # the model alone takes it: validation.py refuses it
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(case.manifest)
    assert {p.path for p in caught.value.problems} == {table.problem_path}, caught.value.problems


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_every_example_passes_every_rule(name):
    manifest = example(name)
    assert {r.key: refusals(r, manifest) for r in RULES} == {r.key: [] for r in RULES}


def test_defaults_reach_the_rules_as_the_api_server_applies_them():
    stored = as_stored(job(capacity={"maxRunDurationSeconds": 86400}))
    assert stored["spec"]["capacity"]["mode"] == "onDemand"
    assert stored["spec"]["tpu"]["slices"] == 1
    assert "nodePool" not in stored["spec"]  # no default for the object itself: its rules do not run
    assert stored["metadata"] == {"name": "train"}


def test_transition_rules_run_on_updates_only_and_message_expressions_are_used():
    """The harness' handling of oldSelf and messageExpression, for when the CRD gains such rules."""
    immutable = CrdRule(steps=("spec", "tpu"), rule="self == oldSelf", message="tpu is immutable")
    before, after = job(), job(tpu={"type": "v5e", "topology": "4x4"})
    assert immutable.transition
    assert refusals(immutable, after) == []  # a create: no oldSelf, the rule does not run
    assert refusals(immutable, before, old=before) == []
    assert refusals(immutable, after, old=before) == ["tpu is immutable"]
    described = CrdRule(
        steps=("spec", "tpu"),
        rule="self.slices <= 2",
        message="too many slices",
        message_expression="'at most 2 slices, not ' + string(self.slices)",
    )
    assert refusals(described, job(tpu={"type": "v6e", "topology": "4x4", "slices": 3})) == [
        "at most 2 slices, not 3"
    ]
    unusable = CrdRule(steps=("spec", "tpu"), rule="false", message="m", message_expression="self.nope")
    assert refusals(unusable, job()) == ["m"]
    assert refusals(CrdRule(steps=(), rule="false"), job()) == ["failed rule: false"]
