"""The tiers, from what a test uses, so a new test lands in its tier without anyone remembering it:

- e2e: it uses the test bed (the `sandbox` fixtures: tpujob_sandbox.pytest_plugin);
- trainer: it runs a real trainer. The test bed's `trainer_image` fixture marks its users; here, a test whose
  module imports TensorFlow, Keras or JAX, or that starts the trainer's own processes (`digits_dir`,
  `start_trainer`);
- image (a podman build) and slow (seconds of work of its own), by hand.

`make check` runs the tests with none of these, `make e2e` the e2e tests without a trainer, `make test` all.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

from tests import cpu_usage, ordering
from tests.trainer.conftest import start_trainer

TRAINER_LIBRARIES = {"tensorflow", "keras", "jax"}
TRAINER_FIXTURES = {"digits_dir"}
CPU_AT_SETUP = pytest.StashKey[float]()


def runs_a_trainer(item: pytest.Item) -> bool:
    if TRAINER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    for value in vars(module).values() if module else ():
        if value is start_trainer:
            return True
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in TRAINER_LIBRARIES:
            return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if runs_a_trainer(item):
            item.add_marker(pytest.mark.trainer)
    items[:] = ordering.longest_first(items, ordering.read_durations())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[CPU_AT_SETUP] = cpu_usage.cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The test's CPU, setup to teardown, as a JUnit property of its teardown report (ci_timing.py)."""
    if call.when == "teardown" and CPU_AT_SETUP in item.stash:
        used = cpu_usage.cpu_seconds() - item.stash[CPU_AT_SETUP]
        item.user_properties.append((cpu_usage.PROPERTY, f"{used:.2f}"))
    yield
