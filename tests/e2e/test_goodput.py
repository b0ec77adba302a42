"""Goodput accounting end to end: the real trainer (the trainer image as a local process) under the operator
on the test bed, reclaimed twice as a spot slice, then left to finish. The status' goodput figures come from
the operator's phases and the trainer's progress line (the last line of its termination message); the
wasted-progress figure must match the steps the next attempts actually redid, from what each attempt's
trainer reported (its progress line: the step it reached, the step it started from)."""

from __future__ import annotations

import json
import re

from tests.manifests import base_job
from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob_sandbox import log_tail, wait_for

STEPS = 4000
# The tolerance on the wasted-progress seconds: the trainer's own step times estimate what redoing the lost
# steps cost; the status' figure is second-resolved per transition.
TOLERANCE_SECONDS = 1.0
TOLERANCE_SHARE = 0.25


def progress_of(jobs, attempt: int) -> dict:
    (pod,) = jobs.pods("goodput", attempt=attempt)
    message = pod.status.container_statuses[0].state.terminated.message or ""
    (line,) = [x for x in message.splitlines() if x.startswith(PROGRESS_LINE_PREFIX)]
    return json.loads(line[len(PROGRESS_LINE_PREFIX) :])


def steps_logged(kubelet, jobs, attempt: int) -> int:
    pods = jobs.pods("goodput", attempt=attempt)
    if not pods:
        return 0
    found = re.findall(r"step (\d+)/", log_tail(kubelet.log_path(jobs.namespace, pods[0].metadata.name)))
    return int(found[-1]) if found else 0


def test_goodput_accounts_two_spot_reclaims_of_the_real_trainer(sandbox, jobs, gke, kubelet, tmp_path):
    manifest = base_job("goodput", capacity={"mode": "spot"})
    manifest["spec"]["trainer"] = {
        "image": "tpujob-trainer:test",
        "args": ["--steps", str(STEPS), "--log-every-steps", "10", "--checkpoint-every-steps", "1000000",
                 "--checkpoint-interval-seconds", "2", "--progress", "log"],
        "checkpointDir": str(tmp_path / "checkpoints"),
    }  # fmt: skip
    jobs.create(manifest)
    progress = []
    for attempt in (0, 1):
        jobs.wait_pods_running("goodput", 1, attempt=attempt, timeout=120)
        # Past its first checkpoints: the reclaim lands mid-training.
        wait_for(lambda: steps_logged(kubelet, jobs, attempt) >= 200 * (attempt + 1), timeout=180,  # noqa: B023
                 what=f"attempt {attempt} to train")  # fmt: skip
        sandbox.preempt_slice(jobs.status("goodput")["nodePools"][0]["name"], recreate_after=1)
        progress.append(progress_of(jobs, attempt))
        wait_for(lambda: jobs.status("goodput").get("restarts") == attempt + 1, timeout=60,  # noqa: B023
                 what=f"restart {attempt + 1}")  # fmt: skip
    status = jobs.wait_phase("goodput", "Succeeded", timeout=300)
    progress.append(progress_of(jobs, 2))
    assert progress[-1]["step"] == STEPS

    goodput = status["goodput"]
    # What the next attempts redid: each preempted attempt's last step past where the next one resumed.
    redone = [progress[a]["step"] - progress[a + 1]["startStep"] for a in (0, 1)]
    assert all(r >= 0 for r in redone), progress
    assert goodput.get("stepsLost", 0) == sum(redone), (goodput, progress)
    # Those steps at the pace the attempt trained at, from its own clock.
    expected = sum(
        r * (p["endedAt"] - p["firstStepAt"]) / max(p["step"] - p["startStep"], 1)
        for r, p in zip(redone, progress, strict=False)
    )
    wasted = goodput["badputSeconds"].get("wastedProgressFromDisruption", 0.0)
    assert abs(wasted - expected) <= TOLERANCE_SECONDS + TOLERANCE_SHARE * expected, (goodput, progress)

    # The rest of the accounting: every category the run went through, and a ratio that adds up.
    badput = goodput["badputSeconds"]
    assert badput["tpuInitialization"] > 0 and badput["programStartup"] > 0, goodput
    assert badput["checkpointSave"] > 0 and badput["checkpointRestore"] > 0, goodput
    total = goodput["productiveSeconds"] + sum(badput.values())
    assert 0 < goodput["ratio"] < 1 and abs(goodput["ratio"] - goodput["productiveSeconds"] / total) < 1e-3
    assert goodput["accountedAttempt"] == 2
    print(
        f"goodput: {json.dumps(goodput, sort_keys=True)}; redone steps {redone}; "
        f"expected wasted {expected:.2f} s"
    )
