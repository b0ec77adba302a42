"""CEL as text: one rule of the CRD (x-kubernetes-validations), literals, and the operator's message templates
(messages.py, tpu.py) turned into CEL string expressions, so the API server and the operator say the same.

Only standard CEL and the strings extension Kubernetes enables (split, lastIndexOf, substring):
https://kubernetes.io/docs/reference/using-api/cel/. tests/unit/test_cel.py runs every rule with them.

Messages join only strings whose length the API server's cost estimate knows (a field with maxLength or an
enum, a literal, a lookup in a literal map): a string it cannot bound (string(int), a map key, anything taken
out of a list by filter) is priced as long as a whole request, and one message over the budget refuses the
whole CRD. Such messages stay static, and the operator's, which can say more, contain them.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The API server's reasons (apiextensions ValidationRule.reason); FieldValueInvalid is its default.
INVALID = "FieldValueInvalid"
FORBIDDEN = "FieldValueForbidden"
REQUIRED = "FieldValueRequired"


@dataclass(frozen=True)
class CelRule:
    """One x-kubernetes-validations entry. `field_path` (".a.b", relative to where the rule sits) is where
    the API server reports a refusal: the path the operator's Problem names. It takes no list index, so a
    rule about list items sits on the items."""

    rule: str
    message: str
    message_expression: str = ""
    field_path: str = ""
    reason: str = ""

    def to_schema(self) -> dict[str, str]:
        entry = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            entry["messageExpression"] = self.message_expression
        if self.field_path:
            entry["fieldPath"] = self.field_path
        if self.reason:
            entry["reason"] = self.reason
        return entry


def lit(value: Any) -> str:
    """A Python value as a CEL literal: str, int, bool, lists and string-keyed maps of them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{lit(k)}: {lit(v)}" for k, v in value.items()) + "}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(lit(v) for v in value) + "]"
    raise TypeError(f"no CEL literal for {value!r}")


def cel_format(template: str, **fields: str) -> str:
    """A `str.format` template as a CEL string expression: `fields` are CEL expressions (of type string);
    what a field need not compute, give as `lit(value)`."""
    parts: list[str] = []
    for text, name, _spec, _conversion in string.Formatter().parse(template):
        if text:
            parts.append(lit(text))
        if name is not None:
            parts.append(f"({fields[name]})")
    return " + ".join(parts) or "''"


def any_of(*conditions: str) -> str:
    return "(" + " || ".join(conditions) + ")" if conditions else "false"


def all_of(*conditions: str) -> str:
    return "(" + " && ".join(conditions) + ")" if conditions else "true"


def number_text(expression: str, largest: int) -> str:
    """string(expression) for an int from 0 to `largest`, as a lookup in a literal map: the API server's
    cost estimate knows the length of a literal, not of string(int)'s result (priced as a whole request)."""
    return f"{lit({n: str(n) for n in range(largest + 1)})}[{expression}]"
