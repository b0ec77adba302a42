"""Two replicas of the operator, as the chart runs them (kopf peering): one reconciles, the other stands by.
SIGKILL the active one while one job provisions and another runs: the standby takes over within the
peering lifetime, every job reaches its fate, and GKE sees each pool created exactly once."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob import peering
from tpujob.api import constants as c
from tpujob_sandbox import (
    GkeSimulator,
    Jobs,
    OperatorProcess,
    Sandbox,
    install_crd,
    install_peering_crds,
    operator_env,
    wait_for,
)

PEERING = "tpujob-operator-test"
LIFETIME_SECONDS = 6
# The standby resumes when the dead replica's record is older than its lifetime; kopf's keepalive
# writes it every lifetime minus 5-10 s (at least 1 s), and the operator's own loop looks every
# lifetime / 5. A job then needs one pass.
TAKEOVER_BOUND_SECONDS = LIFETIME_SECONDS + LIFETIME_SECONDS / 5 + 5


class Replicas:
    def __init__(self, sandbox: Sandbox, folder: Path) -> None:
        self.custom = k8s.CustomObjectsApi(sandbox.api_client)
        self.processes: dict[str, OperatorProcess] = {}
        for name in ("replica-a", "replica-b"):
            env = operator_env(sandbox, folder / name) | {
                "TPUJOB_PEERING": PEERING,
                "TPUJOB_PEERING_LIFETIME_SECONDS": str(LIFETIME_SECONDS),
                "POD_ID": name,
            }
            self.processes[name] = OperatorProcess(env, folder / f"{name}.log")

    def peers(self) -> dict[str, dict[str, object]]:
        """The records in the peering object (which the first replica to start creates)."""
        try:
            found = self.custom.get_cluster_custom_object(
                peering.GROUP, peering.VERSION, peering.CLUSTER_PLURAL, PEERING
            )
        except k8s.ApiException as error:
            if error.status == 404:
                return {}
            raise
        return {k: v for k, v in (found.get("status") or {}).items() if v}

    def active(self, alive: set[str]) -> str | None:
        """The replica that works by kopf's rule, once exactly the `alive` ones are in the object."""
        now = dt.datetime.now(dt.UTC)
        peers = {
            name: peer
            for name, peer in self.peers().items()
            if dt.datetime.fromisoformat(str(peer["lastseen"])) + dt.timedelta(seconds=int(peer["lifetime"]))
            > now
        }
        if set(peers) != alive:
            return None
        leaders = [name for name in peers if peering.leads(peers, name, int(peers[name]["priority"]), now)]
        return leaders[0] if len(leaders) == 1 else None


@pytest.fixture
def replicas(
    sandbox: Sandbox, namespace: str, operator: OperatorProcess, gke: GkeSimulator, tmp_path: Path
) -> Iterator[tuple[Replicas, Jobs]]:
    """The session's single operator steps aside for two peered replicas; after the test, the replicas
    still alive delete its jobs (finalizers and all) before it comes back."""
    install_crd(sandbox)
    install_peering_crds(sandbox)
    for name in ("replica-a", "replica-b"):
        (tmp_path / name).mkdir()
    operator.kill()
    pair = Replicas(sandbox, tmp_path)
    for process in pair.processes.values():
        process.start()
    jobs = Jobs(sandbox, namespace)
    try:
        yield pair, jobs
        for job in jobs.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)[
            "items"
        ]:
            jobs.delete(job["metadata"]["name"])
        wait_for(
            lambda: (
                not jobs.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)[
                    "items"
                ]
            ),
            timeout=90,
            what=f"the TPUJobs of {namespace} to be deleted",
        )
    finally:
        for process in pair.processes.values():
            process.stop()
        operator.start()


def test_the_standby_takes_over_a_provisioning_and_a_running_job_when_the_active_one_is_killed(
    replicas, gke, kubelet
):
    pair, jobs = replicas
    active = wait_for(lambda: pair.active(set(pair.processes)), timeout=30, what="one active replica of two")
    standby = next(name for name in pair.processes if name != active)

    jobs.create(plain_job("running", tpu={"type": "v5e", "topology": "2x2"}))
    (running_pod,) = jobs.wait_pods_running("running", 1, timeout=60)
    # The next pool takes 20 s (of the test's time) to provision: it is PROVISIONING at the kill.
    gke.inject_pool_fault("slow", provisioning_seconds=20 / gke.time_scale)
    jobs.create(plain_job("provisioning", tpu={"type": "v5p", "topology": "2x2x4"}))
    jobs.wait_phase("provisioning", "Provisioning", timeout=30)
    assert gke.calls["CreateNodePool"] == 2

    killed_at = time.monotonic()
    pair.processes[active].kill()
    kubelet.succeed(jobs.namespace, running_pod.metadata.name)
    jobs.wait_phase("running", "Succeeded", timeout=TAKEOVER_BOUND_SECONDS + 30)
    takeover = time.monotonic() - killed_at
    print(f"takeover: the standby finished a job {takeover:.1f} s after the active replica's SIGKILL")
    assert takeover <= TAKEOVER_BOUND_SECONDS, f"took {takeover:.1f} s, bound {TAKEOVER_BOUND_SECONDS} s"
    assert wait_for(lambda: pair.active({standby}), timeout=30, what="the standby alone in the peering")

    # The pool the dead replica asked for comes up; the new active one runs the job on it.
    pods = jobs.wait_pods_running("provisioning", 4, timeout=90)
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    final = jobs.wait_phase("provisioning", "Succeeded", timeout=60)
    assert final.get("restarts", 0) == 0
    # Exactly one create per pool, across both replicas and the takeover; one pod per host.
    assert gke.calls["CreateNodePool"] == 2
    assert {p.metadata.labels[c.LABEL_ATTEMPT] for p in jobs.pods("provisioning")} == {"0"}
    assert len(jobs.pods("provisioning")) == 4
