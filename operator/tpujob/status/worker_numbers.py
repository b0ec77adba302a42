"""Numbers a worker reports (its metrics endpoint, its termination message's progress line) as the status may
hold them: a tenant's trainer writes them, so each is checked, never trusted. Pure."""

from __future__ import annotations

import math

# Steps: whole, from 0 to 2^53 (exact as a float, as Prometheus' text format carries them, and as JSON
# readers in any language keep them).
MAX_STEP = 2**53
# Unix seconds: up to the year 5138; durations: up to ~31 years.
MAX_TIMESTAMP = 1e11
MAX_DURATION = 1e9


class OutOfRange(ValueError):
    """A reported number that is not finite or not within its bounds."""


def step(value: object, name: str) -> int:
    """A step count: a whole number from 0 to MAX_STEP (a float holding one is fine)."""
    number = _finite(value, name)
    if number < 0 or number > MAX_STEP or number != math.floor(number):
        raise OutOfRange(f"{name} is not a whole number from 0 to 2^53")
    return int(number)


def timestamp(value: object, name: str) -> float:
    number = _finite(value, name)
    if not 0 <= number <= MAX_TIMESTAMP:
        raise OutOfRange(f"{name} is not Unix seconds from 0 to {MAX_TIMESTAMP:g}")
    return number


def duration(value: object, name: str) -> float:
    number = _finite(value, name)
    if not 0 <= number <= MAX_DURATION:
        raise OutOfRange(f"{name} is not seconds from 0 to {MAX_DURATION:g}")
    return number


def _finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OutOfRange(f"{name} is not a number")
    if isinstance(value, int) and abs(value) > MAX_STEP:  # before float(): a huge int overflows it
        raise OutOfRange(f"{name} is out of range")
    number = float(value)
    if not math.isfinite(number):
        raise OutOfRange(f"{name} is not finite")
    return number
