"""A running job's progress and a stalled trainer, with the real trainer: the operator reads worker 0's step
counter from its metrics endpoint (pod IP, the port named `metrics`) while it trains, shows it in `kubectl get
tj`, and restarts a trainer whose step stands still past progressDeadlineSeconds as Stalled, quoting where it
hung (the trainer's stack dump on SIGTERM)."""

from __future__ import annotations

import time

from tests.e2e.kubectl_cli import Kubectl, table
from tests.manifests import LIGHT_TRAINING, base_job
from tpujob.status.model import parse_timestamp
from tpujob_sandbox import wait_for
from tpujob_sandbox.operators import RESYNC_SECONDS


def progress_row(cli: Kubectl, namespace: str) -> dict[str, str]:
    header, rows = table(cli.ok("get", "tj", "train", "-n", namespace))
    return dict(zip(header, rows[0], strict=True))


def test_progress_rises_in_kubectl_get_while_the_trainer_runs(
    kubectl, jobs, kubelet, trainer_image, tmp_path
):
    args = ["--steps", "1000000", "--checkpoint-every-steps", "500", "--log-every-steps", "100"]
    args += LIGHT_TRAINING
    trainer = {"image": trainer_image, "args": args, "checkpointDir": str(tmp_path / "checkpoints")}
    jobs.create(base_job("train", trainer=trainer))
    (pod,) = jobs.wait_pods_running("train", 1, timeout=120)
    seen: list[int] = []

    def rising() -> bool:
        status = jobs.status("train").get("progress") or {}
        if status.get("step") is not None and (not seen or status["step"] > seen[-1]):
            seen.append(status["step"])
        return len(seen) >= 3 and bool(status.get("eta")) and status.get("checkpointStep") is not None

    wait_for(
        rising,
        timeout=90,
        what="three rising progress reads with an ETA and a checkpoint",
        last_state=lambda: (seen, jobs.status("train").get("progress"), jobs.pods("train")[0].status.pod_ip),
    )
    progress = jobs.status("train")["progress"]
    assert progress["targetSteps"] == 1_000_000 and progress["attempt"] == 0
    assert 0 < progress["checkpointStep"] <= progress["step"] and progress["checkpointStep"] % 500 == 0
    assert progress["checkpointTime"] <= progress["readTime"]
    row = progress_row(kubectl, jobs.namespace)
    assert row["PROGRESS"] == str(progress["percent"]) and row["ETA"].endswith("Z"), row
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded", timeout=60)


# Room for the trainer to start (TensorFlow loads in seconds; more under load): the clock runs from when
# the attempt runs, and a trainer that never reports a step stalls too.
# The next attempt must reach its first step within it too: a loaded 2-core machine took 36 s (CI, with a soak
# beside it), and the field's description asks for room for startup.
DEADLINE = 60
HANG_AT = 170  # between two checkpoints (every 50 steps): the hung attempt loses 20 steps
HUNG_GRACE_SECONDS = 5


def test_a_hung_trainer_is_restarted_as_stalled_within_its_deadline_and_the_job_then_succeeds(
    jobs, trainer_image, tmp_path
):
    args = ["--steps", "400", "--checkpoint-every-steps", "50", "--hang-at-step", str(HANG_AT)]
    args += LIGHT_TRAINING
    manifest = base_job(
        "train",
        trainer={
            "image": trainer_image,
            "args": args,
            "checkpointDir": str(tmp_path / "checkpoints"),
            # The hung worker ignores SIGTERM: the grace is waited out whole before the next attempt (the
            # default 30 s was a quarter of the test). Its stack dump is taken at the SIGTERM.
            "terminationGracePeriodSeconds": HUNG_GRACE_SECONDS,
        },
        runPolicy={"progressDeadlineSeconds": DEADLINE, "maxRestarts": 1},
    )
    with jobs.recording_job(
        "train"
    ) as history:  # the restart's status, before the next attempt's replaces it
        jobs.create(manifest)
        status = history.first_status(lambda st: st.get("reason") == "Stalled", timeout=120 + DEADLINE)
    progress = status["progress"]
    assert progress["step"] == HANG_AT and progress["attempt"] == 0
    # From when the step stood still to the restart: the deadline, plus at most one resync (and a second of
    # status timestamps' resolution on each side, and a late pass on a loaded machine).
    stood = time.mktime(time.strptime(progress["stepTime"], "%Y-%m-%dT%H:%M:%SZ"))
    restarted = time.mktime(time.strptime(status["lastRestartTime"], "%Y-%m-%dT%H:%M:%SZ"))
    assert DEADLINE <= restarted - stood <= DEADLINE + RESYNC_SECONDS + 6, (
        progress,
        status["lastRestartTime"],
    )
    assert f"stayed at step {HANG_AT}" in status["message"]
    assert (status["restartsByReason"], status["applicationRestarts"]) == ({"Stalled": 1}, 1)

    # The hung worker ignores SIGTERM (as a stuck collective would) and is killed after its grace period; its
    # stack dump, taken at the SIGTERM, names where it hung.
    final = jobs.wait_phase("train", "Succeeded", timeout=130 + DEADLINE)
    # Every Event before the job's Succeeded one (posted in order): the stalled attempt's last words are.
    events = [(e.type, e.reason, e.message) for e in jobs.events_through("train", "Succeeded")]
    quoted = [e for e in events if e[1] == "Stalled" and "last words" in e[2]]
    assert len(quoted) == 1 and quoted[0][0] == "Warning" and "hang (train.py:" in quoted[0][2], events
    words = final["progress"].get("lastWords") or ""
    assert "hang (train.py:" in words and "on_step (train.py:" in words, final["progress"]
    # The step the trainer exited at, from its progress line, however briefly the last attempt ran.
    assert (final["progress"]["attempt"], final["progress"]["step"], final["progress"]["percent"]) == (
        1,
        400,
        100,
    )
    # The stalled attempt's time since its last checkpoint is wasted (goodput), its 20 steps lost.
    goodput = final["goodput"]
    assert goodput["stepsLost"] == HANG_AT - 150, goodput
    assert goodput["badputSeconds"]["wastedProgressFromDisruption"] >= DEADLINE, goodput
    # The restart's record: its cause, the steps the new attempt redid from the checkpoint, and its recovery,
    # from the fault to the new attempt's first step, through every worker running again.
    (record,) = final["restartHistory"]
    assert (record["attempt"], record["reason"]) == (1, "Stalled"), record
    assert (record["step"], record["checkpointStep"], record["stepsRedone"]) == (HANG_AT, 150, 20), record
    assert record["faultTime"] <= record["runningTime"] <= record["recoveredTime"] <= final["completionTime"]
    fault, recovered = (parse_timestamp(record[k]) for k in ("faultTime", "recoveredTime"))
    assert record["recoverySeconds"] == (recovered - fault).total_seconds() > 0, record
