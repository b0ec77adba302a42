"""Fixtures of the chart tests: the pinned helm binary and the chart folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart import tools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tpujob-operator"


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return tools.helm()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)
