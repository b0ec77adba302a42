"""Resource quantities as Kueue counts them: integers, CPU in millicores and everything else in units
(Kueue v0.19.2 pkg/resources/requests.go ResourceValue), and printed back as Kubernetes quantities the way
pkg/resources/resource_formatter.go does (CPU as a milli quantity, memory in binary units, others decimal)."""

from __future__ import annotations

import math
from fractions import Fraction

CPU = "cpu"
MEMORY = "memory"
BINARY_RESOURCES = {MEMORY, "ephemeral-storage"}

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1)}
_DECIMAL.update({"k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12)})
_DECIMAL.update({"P": Fraction(10**15), "E": Fraction(10**18)})


def parse_quantity(text: str | int | float) -> Fraction:
    """A Kubernetes quantity ("500m", "16Gi", "4", "1e3") as an exact number."""
    value = str(text).strip()
    for suffix, factor in _BINARY.items():
        if value.endswith(suffix):
            return Fraction(value[: -len(suffix)]) * factor
    if "e" in value.lower() and not value.endswith(("E",)):
        return Fraction(value.lower())
    for suffix in sorted(_DECIMAL, key=len, reverse=True):
        if suffix and value.endswith(suffix):
            return Fraction(value[: -len(suffix)]) * _DECIMAL[suffix]
    return Fraction(value)


def resource_value(resource: str, text: str | int | float) -> int:
    """Kueue's integer for a quantity: millicores for CPU, rounded up (resource.Quantity's MilliValue and
    Value round up)."""
    amount = parse_quantity(text)
    return math.ceil(amount * 1000) if resource == CPU else math.ceil(amount)


def format_value(resource: str, value: int) -> str:
    """ResourceFormatter.ResourceQuantityString: CPU as milli (2000 -> "2", 1500 -> "1500m"), memory in the
    largest binary unit that divides it exactly, the rest as plain decimal numbers."""
    if resource == CPU:
        return str(value // 1000) if value % 1000 == 0 else f"{value}m"
    if (resource in BINARY_RESOURCES or resource.startswith("hugepages-")) and value != 0:
        for suffix, factor in reversed(_BINARY.items()):
            if value % factor == 0:
                return f"{value // factor}{suffix}"
        # Not a whole binary unit: Quantity.String falls back to a decimal suffix when one is exact.
        for suffix in ("E", "P", "T", "G", "M", "k"):
            factor = int(_DECIMAL[suffix])
            if value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
