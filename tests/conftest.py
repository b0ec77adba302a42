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

import pytest

from tests.trainer.conftest import start_trainer

TRAINER_LIBRARIES = {"tensorflow", "keras", "jax"}
TRAINER_FIXTURES = {"digits_dir"}


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
