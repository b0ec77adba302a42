"""Every example as a queued job, and the Kueue Workload the operator renders for it: the unit tests read
its shape, the test bed's 1.36 server judges it under Kueue's own schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tpujob.api import TPUJob, parse_tpujob
from tpujob.api import constants as c
from tpujob.render import Cluster
from tpujob.render.workload import KueueApi, PriorityFact, workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


def queued_example(
    path: Path, queue: str = "team-a", uid: str = "0b6c2f3e-8d41-4f7a-9c55-2a1e6f0d9b17"
) -> TPUJob:
    manifest: dict[str, Any] = yaml.safe_load(path.read_text())
    metadata = manifest.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    metadata["uid"] = uid
    metadata["labels"] = {**(metadata.get("labels") or {}), c.LABEL_QUEUE_NAME: queue}
    return parse_tpujob(manifest)


def example_workload(
    path: Path, priority: PriorityFact | None = None, api: KueueApi | None = None, **queued: Any
) -> dict[str, Any]:
    return workload(queued_example(path, **queued), Cluster(), priority or PriorityFact(), api)
