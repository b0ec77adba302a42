"""A job's every end leaves nothing of it in the operator: after each, no structure the operator keeps holds
the job's UID or its pools' names. The operator runs under the test bed's probe (tpujob_sandbox/probe.py),
which writes every short string its objects hold, found by walking them: a new per-job map that misses its
forget fails this test without a line here.

Not covered here: a job that vanishes while its replica stands by (peering; tests/e2e/test_failover.py
drives that end, and the unit tests of handlers/workqueue.vanished and loops.take_over prove it leaves the
index and is forgotten)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.manifests import plain_job
from tpujob import logs
from tpujob.api import constants as c
from tpujob_sandbox import OperatorProcess, wait_for
from tpujob_sandbox.probe import HELD_ENV, PERIOD_ENV
from tpujob_sandbox.waiting import Timeout

V5E = {"type": "v5e", "topology": "2x2"}


@pytest.fixture
def probed(operator: OperatorProcess, tmp_path: Path):
    """The session's operator stopped, the same one started under the probe; the session's back after."""
    operator.stop()
    probe = tmp_path / "probe.json"
    env = {**operator.env, HELD_ENV: "1", PERIOD_ENV: "1"}
    process = OperatorProcess(env, tmp_path / "operator.log", probe=probe).start()
    wait_for(probe.exists, timeout=60, what="the operator's probe to write")
    yield probe
    process.stop()
    operator.start()


def held(probe: Path) -> set[str]:
    try:
        return set(json.loads(probe.read_text())["held"])
    except (OSError, ValueError, KeyError):
        return set()


def pools_of(jobs, name: str) -> set[str]:
    return {pool["name"] for pool in jobs.status(name).get("nodePools") or []}


def patch_spec(jobs, name: str, spec: dict) -> None:
    jobs.custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, name, {"spec": spec}
    )


def test_every_end_of_a_job_leaves_nothing_of_it_in_the_operator(jobs, gke, kubelet, probed):
    # Provisioning is slow for the one job deleted while its pool is being made.
    gke.inject_pool_fault("slow", provisioning_seconds=30 / gke.time_scale)
    ended: dict[str, tuple[str, set[str]]] = {}  # job -> (uid, its pools)

    def remember(name: str) -> None:
        ended[name] = (jobs.get(name)["metadata"]["uid"], pools_of(jobs, name))

    # Delete while provisioning: the operator saw its pool PROVISIONING, and it never became ready.
    jobs.create(plain_job("provisioning", tpu=V5E))
    wait_for(
        lambda: any(
            p.get("state") == "PROVISIONING" for p in jobs.status("provisioning").get("nodePools") or []
        ),
        timeout=60,
        what="the pool to be PROVISIONING",
    )
    remember("provisioning")
    jobs.delete("provisioning")

    for name in ("succeeds", "fails", "running", "suspended"):
        run_policy = {"maxRestarts": 0} if name == "fails" else {}
        jobs.create(plain_job(name, tpu=V5E, runPolicy=run_policy))
    running = {
        name: jobs.wait_pods_running(name, 1, timeout=90)[0] for name in ("succeeds", "fails", "running")
    }
    jobs.wait_pods_running("suspended", 1, timeout=90)
    for name in ("succeeds", "fails", "running", "suspended"):
        remember(name)
    kubelet.succeed(jobs.namespace, running["succeeds"].metadata.name)
    kubelet.fail(jobs.namespace, running["fails"].metadata.name)
    jobs.wait_phase("succeeds", "Succeeded")
    jobs.wait_phase("fails", "Failed")
    patch_spec(jobs, "suspended", {"runPolicy": {"suspend": True}})
    wait_for(lambda: not jobs.pods("suspended"), timeout=60, what="the suspended job's pods to go")
    for name in ("succeeds", "fails", "running", "suspended"):
        jobs.delete(name)
    for name in ended:
        wait_for(lambda name=name: jobs.gone(name), timeout=120, what=f"{name} to be deleted")

    wanted = {name: {uid, *pools} for name, (uid, pools) in ended.items()}
    assert all(pools for _, pools in ended.values()), f"every job had its pool: {ended}"

    def kept() -> dict[str, list[str]]:
        now = held(probed)
        assert now, "the probe has written what the operator holds"
        return {name: sorted(strings & now) for name, strings in wanted.items() if strings & now}

    try:
        wait_for(lambda: not kept(), timeout=30, what="the operator to let go of every ended job")
    except Timeout:
        pytest.fail(f"the operator still holds, per ended job: {kept()}")


def test_a_jobs_whole_life_writes_a_few_lines_at_the_default_level_and_no_error(jobs, gke, kubelet, probed):
    """Create, provision, run, succeed, delete: the operator's log says what it decided (the pool asked for,
    then deleted; the deletion's wait, once), with no line per HTTP request and no ERROR for the wait."""
    log_path = probed.parent / "operator.log"
    before = len(log_path.read_text().splitlines())
    jobs.create(plain_job("quiet", tpu=V5E))
    (pod,) = jobs.wait_pods_running("quiet", 1, timeout=90)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("quiet", "Succeeded")
    jobs.delete("quiet")
    wait_for(lambda: jobs.gone("quiet"), timeout=120, what="the job to be deleted")
    lines = log_path.read_text().splitlines()[before:]
    own = [line for line in lines if "quiet" in line]  # the job's name, or its pool's (tj-quiet-...)
    print(f"one job's life at the default level: {len(own)} lines of {len(lines)}", *lines, sep="\n")
    assert not [line for line in lines if "[ERROR" in line], "a wait is not an error"
    assert not [line for line in lines if "HTTP Request" in line], "no line per HTTP request"
    # The pool asked for and its delete asked for, once each; the deletion's wait at most once (none when
    # GKE had deleted the pool, which the job's success started, before the job was deleted).
    said = [sum(phrase in line for line in own) for phrase in ("create requested", "delete requested")]
    waits = sum(logs.WAITING_FOR_POOLS in line for line in own)
    assert said == [1, 1] and waits <= 1 and len(own) == 2 + waits, own
