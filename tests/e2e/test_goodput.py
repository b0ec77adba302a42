"""Goodput accounting end to end: the real trainer (the trainer image as a local process) under the operator
on the test bed, disrupted twice, then left to finish. The status' goodput figures come from the operator's
phases and the trainer's progress line (the last line of its termination message); the wasted-progress
figures must match the steps the next attempts actually redid, from what each attempt's trainer reported
(its log: the step it reached; its progress line: the step it started from).

Two disruptions: a spot reclaim (SIGTERM and a grace period: the trainer saves, ~nothing is lost) and the
OOM killer (SIGKILL: no save, no last word; the trainer's periodic progress line is what the operator reads).
"""

from __future__ import annotations

import json
import re
import time

from tests.manifests import LIGHT_TRAINING, base_job
from tpujob.api.constants import PROGRESS_LINE_PREFIX
from tpujob_sandbox import log_tail, wait_for
from tpujob_trainer.termination import PROGRESS_WRITE_SECONDS

STEPS = 4000
# The tolerance on the wasted-progress seconds: the trainer's own step times estimate what redoing the lost
# steps cost; the status' figure is second-resolved per transition.
TOLERANCE_SECONDS = 1.0
TOLERANCE_SHARE = 0.25


def parse_line(message: str) -> dict | None:
    lines = [x for x in message.splitlines() if x.startswith(PROGRESS_LINE_PREFIX)]
    return json.loads(lines[-1][len(PROGRESS_LINE_PREFIX) :]) if lines else None


def progress_of(seen, attempt: int) -> dict:
    """The progress line `attempt` left in its termination message, as the API server gave it."""
    (pod,) = seen.wait_finished(attempt)
    message = pod.status.container_statuses[0].state.terminated.message or ""
    (line,) = [x for x in message.splitlines() if x.startswith(PROGRESS_LINE_PREFIX)]
    return json.loads(line[len(PROGRESS_LINE_PREFIX) :])


def steps_logged(kubelet, jobs, attempt: int) -> int:
    pods = jobs.pods("goodput", attempt=attempt)
    if not pods:
        return 0
    found = re.findall(r"step (\d+)/", log_tail(kubelet.log_path(jobs.namespace, pods[0].metadata.name)))
    return int(found[-1]) if found else 0


def test_goodput_accounts_two_spot_reclaims_of_the_real_trainer(
    sandbox, jobs, gke, kubelet, tmp_path, trainer_image
):
    """What a spot reclaim costs: GKE's graceful node shutdown gives the trainer SIGTERM and 15 s, it saves a
    checkpoint at the step it stops at, so each reclaim costs ~0 steps (stepsLost 0, matched against the
    steps the next attempt redid, also 0) but its recovery and restart overheads are accounted."""
    manifest = base_job("goodput", capacity={"mode": "spot"})
    manifest["spec"]["trainer"] = {
        "image": trainer_image,
        "args": ["--steps", str(STEPS), "--log-every-steps", "10", "--checkpoint-every-steps", "1000000",
                 "--checkpoint-interval-seconds", "2", "--progress", "log", *LIGHT_TRAINING],
        "checkpointDir": str(tmp_path / "checkpoints"),
    }  # fmt: skip
    with jobs.recording_pods("goodput") as seen:  # a finished pod may go with its pool
        jobs.create(manifest)
        progress = []
        for attempt in (0, 1):
            jobs.wait_pods_running("goodput", 1, attempt=attempt, timeout=120)
            # Past its first checkpoints: the reclaim lands mid-training.
            wait_for(lambda: steps_logged(kubelet, jobs, attempt) >= 200 * (attempt + 1), timeout=180,  # noqa: B023
                     what=f"attempt {attempt} to train")  # fmt: skip
            sandbox.preempt_slice(jobs.status("goodput")["nodePools"][0]["name"], recreate_after=1)
            progress.append(progress_of(seen, attempt))
            wait_for(lambda: jobs.status("goodput").get("restarts") == attempt + 1, timeout=60,  # noqa: B023
                     what=f"restart {attempt + 1}")  # fmt: skip
        status = jobs.wait_phase("goodput", "Succeeded", timeout=300)
        progress.append(progress_of(seen, 2))
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


# Enough steps that a resumed attempt still trains past its first interval checkpoint on a quiet machine
# (about 290 steps/s here: with 3000, attempt 1 finished 1454 steps in 5.3 s, before its first checkpoint).
OOM_STEPS = 6000
# The trainer checkpoints every CHECKPOINT_SECONDS; each kill lands between two checkpoints, at least
# KILL_AFTER_SECONDS after the last (so some steps are lost) and well before the next.
CHECKPOINT_SECONDS = 6
KILL_AFTER_SECONDS = 1.0


def test_goodput_counts_the_steps_two_oom_kills_lost_as_the_next_attempts_redid_them(
    jobs, gke, kubelet, tmp_path, trainer_image
):
    """The OOM killer ends the trainer twice mid-training. On a TPU VM the host's memory is shared by the
    input pipeline and the runtime's host buffers; when it runs out, the kernel SIGKILLs the container's
    process: no SIGTERM, no checkpoint, no last word, and the kubelet reports exit 137 / OOMKilled with the
    termination log as the process left it (see KubeletSimulator.oom_kill). The trainer checkpoints on a
    time interval; the steps since its last checkpoint are lost and redone by the next attempt.

    The operator knows them only from the trainer's periodic progress line (rewritten at most every
    PROGRESS_WRITE_SECONDS, so up to that many seconds' steps stale) and the container's finishedAt."""
    manifest = base_job("goodput", runPolicy={"maxRestarts": 5})  # an OOM kill (137) counts as a failure
    manifest["spec"]["trainer"] = {
        "image": trainer_image,
        "args": ["--steps", str(OOM_STEPS), "--log-every-steps", "1", "--checkpoint-every-steps", "1000000",
                 "--checkpoint-interval-seconds", str(CHECKPOINT_SECONDS), "--progress", "log",
                 *LIGHT_TRAINING],
        "checkpointDir": str(tmp_path / "checkpoints"),
    }  # fmt: skip
    with jobs.recording_pods("goodput") as seen:  # a finished pod may go with its pool
        jobs.create(manifest)
        # Per killed attempt: its last periodic line as the test saw it, kill time, pod.
        killed: list[dict] = []
        for attempt in (0, 1):
            (pod,) = jobs.wait_pods_running("goodput", 1, attempt=attempt, timeout=120)
            name = pod.metadata.name
            termination_log = kubelet.containers.termination_log_path(jobs.namespace, name)

            def mid_interval(termination_log=termination_log) -> dict | None:
                # A checkpoint of this attempt KILL_AFTER_SECONDS ago or more, the next one seconds away.
                text = termination_log.read_text() if termination_log.exists() else ""
                line = parse_line(text)
                if not line or line.get("checkpointAt") is None or line["step"] <= line["checkpointStep"]:
                    return None
                age = time.time() - line["checkpointAt"]
                return line if KILL_AFTER_SECONDS <= age <= CHECKPOINT_SECONDS - 3 else None

            wait_for(mid_interval, timeout=180, what=f"attempt {attempt} between two checkpoints")
            killed_at = time.time()
            ended = kubelet.oom_kill(jobs.namespace, name)
            terminated = ended.status.container_statuses[0].state.terminated
            assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")
            line = parse_line(terminated.message or "")
            assert line is not None, terminated.message  # the periodic line, no human line: no last word
            assert not [
                x
                for x in terminated.message.splitlines()
                if x.strip() and not x.startswith(PROGRESS_LINE_PREFIX)
            ]
            killed.append({"line": line, "killed_at": killed_at, "pod": name})
            wait_for(lambda: jobs.status("goodput").get("restarts") == attempt + 1, timeout=60,  # noqa: B023
                     what=f"restart {attempt + 1}")  # fmt: skip
        status = jobs.wait_phase("goodput", "Succeeded", timeout=300)
        final = progress_of(seen, 2)
        assert final["step"] == OOM_STEPS
        starts = [resumed_at_step(seen, kubelet, a) for a in (1, 2)]
    assert starts[1] == final["startStep"]

    # What actually happened: the step each killed attempt reached (its log has a line per step), and the
    # step the next one resumed from: the checkpoint its periodic line named.
    reached = [last_step_logged(kubelet, jobs, k["pod"]) for k in killed]
    redone = [reached[a] - starts[a] for a in (0, 1)]
    for k, start in zip(killed, starts, strict=True):
        assert start == k["line"]["checkpointStep"], (killed, starts)
    assert all(r > 0 for r in redone), (reached, starts)

    goodput = status["goodput"]
    lost = goodput.get("stepsLost", 0)
    # The periodic line is never ahead of the trainer, and at most PROGRESS_WRITE_SECONDS of its steps behind
    # (plus the step in flight): the tolerance is the steps each attempt did in that time, at its own pace.
    pace = [
        (k["line"]["step"] - k["line"]["startStep"])
        / max(k["line"]["endedAt"] - k["line"]["firstStepAt"], 1e-3)
        for k in killed
    ]
    slack = sum(PROGRESS_WRITE_SECONDS * p + 1 for p in pace)
    assert 0 < lost <= sum(redone) and sum(redone) - lost <= slack, (goodput, redone, pace)

    wasted = goodput["badputSeconds"].get("wastedProgressFromDisruption", 0.0)
    # The seconds run from each attempt's last checkpoint to when its container ended (finishedAt, second-
    # resolved: up to 1 s early, plus the time the kubelet took to see the exit) - by the test's clock.
    by_clock = sum(k["killed_at"] - k["line"]["checkpointAt"] for k in killed)
    assert by_clock - 2.0 <= wasted <= by_clock + 2.0, (goodput, by_clock)
    # And the redone steps at the pace each attempt trained at: the same time, within its variance.
    expected = sum(r / p for r, p in zip(redone, pace, strict=True))
    assert abs(wasted - expected) <= 2.0 + TOLERANCE_SHARE * expected, (goodput, expected)
    # Without the container's finishedAt the figure would stop at each line's endedAt: it does not.
    stale = sum(k["line"]["endedAt"] - k["line"]["checkpointAt"] for k in killed)
    # (the status keeps 3 decimals per figure: allow their rounding, one per kill)
    assert wasted >= stale - 0.001 * len(killed), (wasted, stale)
    assert goodput.get("unreportedAttempts", 0) == 0 and goodput["accountedAttempt"] == 2
    print(
        f"goodput (OOM kills): stepsLost {lost}, redone {redone} (reached {reached}, resumed at {starts}), "
        f"wasted {wasted:.2f} s, expected {expected:.2f} s by pace, {by_clock:.2f} s by clock, "
        f"{stale:.2f} s from the lines alone; {json.dumps(goodput, sort_keys=True)}"
    )


def last_step_logged(kubelet, jobs, pod: str) -> int:
    found = re.findall(r"step (\d+)/", kubelet.log_path(jobs.namespace, pod).read_text(errors="replace"))
    return int(found[-1]) if found else 0


def resumed_at_step(seen, kubelet, attempt: int) -> int:
    """The step `attempt` resumed at, from its log ("resumed from ... at step N")."""
    (pod,) = seen.pods(attempt)
    text = kubelet.log_path(pod.metadata.namespace, pod.metadata.name).read_text(errors="replace")
    (step,) = re.findall(r"resumed from \S+ at step (\d+)", text)
    return int(step)
