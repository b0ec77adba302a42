"""What the operator reads of a TPU node's conditions (handlers/nodes.py node_faults) is bounded and parsed
defensively: a tenant cannot write nodes, but a compromised node writes its own status."""

from __future__ import annotations

import pytest

from tpujob import status as s
from tpujob.handlers import nodes

HANG, SLICE = "MegascaleHangDetected", "SliceErrorDetected"
BEAT = "2026-11-21T11:00:00Z"


def node(*conditions: object) -> dict[str, object]:
    return {"metadata": {"name": "n"}, "status": {"conditions": list(conditions)}}


def test_the_device_plugin_s_conditions_are_read_as_it_writes_them():
    faults = nodes.node_faults(
        node(
            {"type": "Ready", "status": "True"},
            {"type": HANG, "status": "True", "lastHeartbeatTime": BEAT, "message": "hang"},
            {"type": SLICE, "status": "False", "lastHeartbeatTime": BEAT},
        )
    )
    assert faults == (s.NodeFault(HANG, BEAT, "hang"),)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"status": None},
        {"status": "a string"},
        {"status": {"conditions": {"type": HANG}}},
        {"status": {"conditions": "True"}},
        node(None, 7, "x", [HANG]),
        node({"type": {"a": "dict"}, "status": "True"}),
        node({"type": [HANG], "status": "True"}),
        node({"type": None, "status": "True"}),
    ],
)
def test_a_status_not_shaped_as_kubernetes_writes_it_gives_no_fault_and_raises_nothing(body):
    assert nodes.node_faults(body) == ()


def test_what_is_read_is_bounded():
    huge = "x" * 1_000_000
    faults = nodes.node_faults(
        node(
            *(
                {"type": HANG, "status": "True", "lastHeartbeatTime": BEAT, "message": huge}
                for _ in range(1000)
            ),
        )
    )
    assert len(faults) == 1 and len(faults[0].message) == nodes.MAX_FAULT_MESSAGE
    # Past the first MAX_CONDITIONS conditions nothing is read.
    buried = node(
        *({"type": "Ready", "status": "True"} for _ in range(nodes.MAX_CONDITIONS)),
        {"type": SLICE, "status": "True", "lastHeartbeatTime": BEAT},
    )
    assert nodes.node_faults(buried) == ()


@pytest.mark.parametrize(
    "heartbeat", ["yesterday", "9999-99-99T99:99:99Z", 1732186800, None, ["x"], BEAT + " " * 10**5]
)
def test_a_heartbeat_that_is_not_a_time_is_none_and_restarts_nothing(heartbeat):
    (fault,) = nodes.node_faults(
        node({"type": SLICE, "status": "True", "lastHeartbeatTime": heartbeat, "message": {"not": "text"}})
    )
    assert fault == s.NodeFault(SLICE, "", "")
