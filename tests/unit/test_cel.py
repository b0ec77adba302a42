"""Every CEL rule of the generated CRD, run by Google's CEL (cel-expr-python) on realistic manifests.

The quick tier's proof of the `x-kubernetes-validations` of crds/tpujob.dev_tpujobs.yaml (a Kubernetes
1.20 API server predates CEL; the e2e tier posts the same cases to a 1.36 one). Here each rule runs on the
value a 1.25+ API server would give it: `self` is the object at the rule's place in a TPUJob manifest,
after the server has pruned unknown fields and applied the schema's defaults. The cases are
tests/apply_cases.py's, the table the operator (test_apply_cases.py) and a real API server (e2e) judge too:
every accepted case passes every rule, every refused case is refused by the rules at its field path with
its words (or, where the schema refuses it, by the model that mirrors the schema, or by a keyed list's
Duplicate value, judged here as the server does). A rule added to the CRD that no refused case trips fails
test_every_rule_of_the_crd_has_cases until the table has one.

Kubernetes' CEL environment is standard CEL plus extension libraries
(https://kubernetes.io/docs/reference/using-api/cel/): cel-go's strings extension at version 2 from 1.29
(k8s.io/apiserver/pkg/cel/environment), and Kubernetes' own libraries (lists, regex, URLs, quantity, IP,
CIDR, format, semver). The rules use standard CEL (`has()`, `in`, `? :`, `size()`, `matches()` (RE2, as in
Kubernetes), `startsWith`, `contains`, the macros `all`, `exists`, `exists_one`, `filter` and `map`) and the
strings extension (`split`, `lastIndexOf`, `substring`). A rule that calls a
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

import pydantic
import pytest
import yaml

from tests.apply_cases import ACCEPTED, REFUSED, TRANSITIONS, Case
from tests.manifests import base_job
from tpujob import tpu as catalog
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
    field_path: str = ""  # where the API server reports, relative to the rule's place

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
            field_path=entry.get("fieldPath", ""),
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


def values_at(stored: Any, steps: tuple[str, ...]) -> list[tuple[str, Any]]:
    """Every value a rule at `steps` runs on, with its path as the API server writes it (spec.pod.
    containers[0]); none when the field is absent: the rule does not run."""
    nodes: list[tuple[str, Any]] = [("", stored)]
    for step in steps:
        following: list[tuple[str, Any]] = []
        for path, node in nodes:
            if step == "[*]" and isinstance(node, list):
                following += [(f"{path}[{i}]", item) for i, item in enumerate(node)]
            elif step == "{*}" and isinstance(node, dict):
                following += [(f"{path}[{key}]", item) for key, item in node.items()]
            elif isinstance(node, dict) and step in node:
                following.append((f"{path}.{step}" if path else step, node[step]))
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


def refusals(
    rule: CrdRule, manifest: dict[str, Any], old: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Where and with what the API server would refuse `manifest` for this rule (none: accepted): the
    rule's place plus its fieldPath, and its message. `old` is the stored object on an update; transition
    rules do not run without it."""
    assert not rule.optional_old_self, f"{rule.path}: optionalOldSelf rules are not handled by this test"
    news = values_at(as_stored(manifest), rule.steps)
    if not rule.transition:
        pairs = [(here, new, None) for here, new in news]
    else:
        # Kubernetes correlates old and new values by property name (and by key in maps and map-lists);
        # this harness handles property paths only.
        assert not {"[*]", "{*}"} & set(rule.steps), f"{rule.path}: transition rule inside a list or map"
        olds = values_at(as_stored(old), rule.steps) if old is not None else []
        pairs = [(here, new, old_value) for (here, new), (_, old_value) in zip(news, olds, strict=False)]
    found = []
    for here, new, old_value in pairs:
        data = {"self": new} if old_value is None else {"self": new, "oldSelf": old_value}
        result = compiled(rule.rule).eval(data=data)
        assert result.type() == cel.Type.BOOL, (
            f"{rule.path}: {rule.rule!r} did not give a bool on {new!r} (the API server would refuse the "
            f"object with an evaluation error): {result.value()!r}"
        )
        if not result.value():
            field = (here + rule.field_path) if here else rule.field_path.lstrip(".")
            found.append((field, _message(rule, data)))
    return found


def _message(rule: CrdRule, data: dict[str, Any]) -> str:
    """messageExpression when it gives a usable string, else message, else "failed rule: <rule>" (the
    CRD API reference, ValidationRule)."""
    if rule.message_expression:
        result = compiled(rule.message_expression).eval(data=data)
        text = result.value() if result.type() == cel.Type.STRING else ""
        if text.strip() and "\n" not in text:
            return str(text)
    return rule.message or f"failed rule: {rule.rule}"


# --- The rules on the cases of tests/apply_cases.py -------------------------------------------------


def duplicates(value: Any, schema: dict[str, Any], path: str = "") -> list[tuple[str, str]]:
    """The API server's check of keyed lists (x-kubernetes-list-type map): every item after the first with
    a key already seen, at the item's path, as "Duplicate value" (apiextensions schema/listtype)."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            child = schema.get("properties", {}).get(key)
            if child is not None:
                found += duplicates(item, child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen: set[str] = set()
        for index, item in enumerate(value):
            here = f"{path}[{index}]"
            if schema.get("x-kubernetes-list-type") == "map" and isinstance(item, dict):
                key = json.dumps({k: item.get(k) for k in keys}, sort_keys=True)
                if key in seen:
                    found.append((here, f"Duplicate value: {key}"))
                seen.add(key)
            found += duplicates(item, schema.get("items", {}), here)
    return found


def all_refusals(manifest: dict[str, Any]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """Every rule that refuses `manifest`, with where and what it says."""
    return {rule.key: found for rule in RULES if (found := refusals(rule, manifest))}


def label(key: tuple[str, str]) -> str:
    """A rule's short name for test ids: its path and its place among the rules there."""
    here = [rule.key for rule in RULES if rule.path == key[0]]
    return f"{key[0]}#{here.index(key) if key in here else '?'}"


@functools.cache
def rules_tripped() -> dict[tuple[str, str], list[str]]:
    """Rule -> the refused cases it refuses."""
    tripped: dict[tuple[str, str], list[str]] = {rule.key: [] for rule in RULES}
    for case in REFUSED:
        for key in all_refusals(case.manifest):
            tripped[key].append(case.name)
    for edit in TRANSITIONS:
        for rule in RULES:
            if edit.refused_at and rule.transition and refusals(rule, edit.new, edit.old):
                tripped[rule.key].append(edit.name)
    return tripped


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
    """Every rule is tripped by a refused case of tests/apply_cases.py (and passed by every accepted one,
    test_accepted_cases_pass_every_rule): add a case to that table for a new rule."""
    missing = sorted(label(key) + f" {key[1][:80]}" for key, cases in rules_tripped().items() if not cases)
    assert not missing, f"CEL rules no case of tests/apply_cases.py REFUSED trips: {missing}"


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


def test_messages_join_only_strings_of_known_length():
    """The API server prices a string it cannot bound (string(int), a map key, anything a comprehension
    took out of a list) as long as a whole request, and refuses the CRD when a message's estimate is over
    budget (operator/tpujob/api/cel_text.py): messages join fields, literals and literal-map lookups."""
    unbounded = re.compile(r"\bstring\(|\.join\(|\.filter\(|\.map\(|\.all\(|\.exists\(")
    for rule in RULES:
        code = re.sub(r"'(?:[^'\\]|\\.)*'", "''", rule.message_expression or "")  # literals say nothing
        assert not unbounded.search(code), (rule.path, rule.message_expression)


@pytest.mark.parametrize("case", ACCEPTED, ids=[case.name for case in ACCEPTED])
def test_accepted_cases_pass_every_rule(case: Case):
    assert all_refusals(case.manifest) == {}
    assert duplicates(as_stored(case.manifest), SCHEMA) == []


@pytest.mark.parametrize("case", REFUSED, ids=[case.name for case in REFUSED])
def test_refused_cases_are_refused_at_their_field_with_their_words(case: Case):
    """By the CEL rules at the case's field path, with its words; where no rule refuses it, the schema
    does, and the model (whose constraints the schema is generated from) refuses it too."""
    found = [
        refusal for refusals_of_rule in all_refusals(case.manifest).values() for refusal in refusals_of_rule
    ]
    found += duplicates(as_stored(case.manifest), SCHEMA)
    if not found:
        with pytest.raises(pydantic.ValidationError) as caught:
            TPUJob.model_validate(case.manifest)
        places = {".".join(str(part) for part in error["loc"]) for error in caught.value.errors()}
        assert places == {re.sub(r"\[(\d+)\]", r".\1", case.refused_at)}, places
        return
    assert {path for path, _ in found} == {case.refused_at}, found
    assert all(case.message_part in message for _, message in found), found


CEL_TRANSITIONS = [edit for edit in TRANSITIONS if edit.cel]


@pytest.mark.parametrize("edit", CEL_TRANSITIONS, ids=[edit.name for edit in CEL_TRANSITIONS])
def test_the_transition_rules_give_each_edits_verdict_at_its_field(edit):
    """An update runs every rule on the new object with oldSelf the stored one (the status of a spec update
    is the stored status: the status subresource keeps it)."""
    found = [refusal for rule in RULES for refusal in refusals(rule, edit.new, edit.old)]
    assert {path for path, _ in found} == ({edit.refused_at} if edit.refused_at else set()), found
    assert all(edit.message_part in message for _, message in found), found


# --- The catalog's rules say what the catalog says --------------------------------------------------

_GRID = {
    2: [f"{a}x{b}" for a in (1, 2, 3, 4, 8, 16, 32) for b in (1, 2, 4, 8, 16, 32)],
    3: [f"{a}x{b}x{c}" for a in (1, 2, 4, 8, 12) for b in (1, 2, 4, 8, 12) for c in (1, 2, 4, 8, 16, 64)],
}


def _operator_refuses(tpu: dict[str, Any]) -> bool:
    try:
        parse_tpujob(base_job(tpu=tpu, trainer={"image": "jax:1"}, nodePool={"workloadPolicy": "wp"}))
    except InvalidTPUJob as error:
        return any(p.path.startswith("spec.tpu") for p in error.problems)
    return False


@pytest.mark.parametrize("tpu_type", catalog.TPU_TYPES)
def test_the_rules_on_spec_tpu_agree_with_the_catalog(tpu_type):
    """Every topology of a grid (both ranks, listed shapes, multiples of 4, too large), with each machine
    type of the generation or none, as one slice and as two: refused by the rules on spec.tpu exactly when
    the operator (tpu.resolve_slice and the Multislice check) refuses it."""
    generation = catalog.GENERATIONS[tpu_type]
    tpu_rules = [rule for rule in RULES if rule.path == "$.spec.tpu"]
    disagree = []
    for topology in _GRID[2] + _GRID[3]:
        for machine in (None, *(m.name for m in generation.machine_types)):
            for slices in (1, 2):
                tpu = {"type": tpu_type, "topology": topology, "slices": slices}
                if machine:
                    tpu["machineType"] = machine
                manifest = base_job(tpu=tpu)
                cel_refuses = any(refusals(rule, manifest) for rule in tpu_rules)
                if cel_refuses != _operator_refuses(tpu):
                    disagree.append((topology, machine, slices, cel_refuses))
    assert not disagree, disagree[:20]


# --- The harness itself ------------------------------------------------------------------------------


def test_defaults_reach_the_rules_as_the_api_server_applies_them():
    stored = as_stored(base_job(capacity={"maxRunDurationSeconds": 86400}))
    assert stored["spec"]["capacity"]["mode"] == "onDemand"
    assert stored["spec"]["tpu"]["slices"] == 1
    assert "nodePool" not in stored["spec"]  # no default for the object itself: its rules do not run
    assert stored["metadata"] == {"name": "train"}


def test_transition_rules_run_on_updates_only_and_message_expressions_are_used():
    """The harness' handling of oldSelf, messageExpression and fieldPath (transition rules: for when the
    CRD gains one)."""
    immutable = CrdRule(steps=("spec", "tpu"), rule="self == oldSelf", message="tpu is immutable")
    before, after = base_job(), base_job(tpu={"type": "v5e", "topology": "4x4"})
    assert immutable.transition
    assert refusals(immutable, after) == []  # a create: no oldSelf, the rule does not run
    assert refusals(immutable, before, old=before) == []
    assert refusals(immutable, after, old=before) == [("spec.tpu", "tpu is immutable")]
    described = CrdRule(
        steps=("spec", "tpu"),
        rule="self.slices <= 2",
        message="too many slices",
        message_expression="'at most 2 slices, not ' + string(self.slices)",
        field_path=".slices",
    )
    assert refusals(described, base_job(tpu={"type": "v6e", "topology": "4x4", "slices": 3})) == [
        ("spec.tpu.slices", "at most 2 slices, not 3")
    ]
    unusable = CrdRule(steps=("spec", "tpu"), rule="false", message="m", message_expression="self.nope")
    assert refusals(unusable, base_job()) == [("spec.tpu", "m")]
    assert refusals(CrdRule(steps=(), rule="false"), base_job()) == [("", "failed rule: false")]
    item = CrdRule(steps=("spec", "trainer", "env", "[*]"), rule="self.name != 'B'", field_path=".name")
    manifest = base_job(trainer={"image": "i", "env": [{"name": "A"}, {"name": "B"}]})
    assert refusals(item, manifest) == [("spec.trainer.env[1].name", "failed rule: self.name != 'B'")]
