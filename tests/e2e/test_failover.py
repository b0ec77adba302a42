"""Two replicas of the operator, as the chart runs them (kopf peering): one reconciles, the other stands by.
SIGKILL the active one while one job provisions and another runs: the standby takes over within the
peering lifetime, every job reaches its fate, and GKE sees each pool created exactly once. Only one of two
replicas starting together acts; a replica taking over after standing by creates nothing for jobs deleted
meanwhile and sweeps their pools; a process killed right after GKE accepted a re-requested pool leaves
the pool GKE is retrying alone."""

from __future__ import annotations

import datetime as dt
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from google.cloud import container_v1
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
    operator_kubeconfig,
    wait_for,
)
from tpujob_sandbox.partition import PartitionProxy

PEERING = "tpujob-operator-test"
LIFETIME_SECONDS = 6
RENEW_DEADLINE_SECONDS = 4
# The standby resumes when the dead replica's record is older than its lifetime; kopf's keepalive
# writes it every lifetime minus 5-10 s (at least 1 s), and the operator's own loop looks every
# lifetime / 5, READS_TO_LEAD times in a row before it acts (a replica just started and alone in the object
# also waits a lifetime: peering.starting_lead). A job then needs one pass.
# Two operators starting (imports, kopf, their first peering writes) on a machine that may be loaded: CI with
# a soak beside it once took more than 30 s.
STARTUP_SECONDS = 90
TAKEOVER_BOUND_SECONDS = LIFETIME_SECONDS + peering.READS_TO_LEAD * LIFETIME_SECONDS / 5 + 5


def logged_at(log: str, words: str, nth: int = 0) -> dt.datetime:
    """When the `nth` line (from 0) with `words` was written, from its timestamp ([2026-11-27 18:00:34,614]
    ...). A replica may say a thing more than once: the low one started first is active for a moment before
    the high one's record appears, so its takeover is its second "is now active"."""
    line = [line for line in log.splitlines() if words in line][nth]
    return dt.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")


def said(log: str, words: str) -> int:
    """How many lines of `log` have `words`: a wait for a new one counts from what was said before."""
    return sum(words in line for line in log.splitlines())


class Replicas:
    def __init__(self, sandbox: Sandbox, folder: Path, settings: dict[str, dict[str, str]]) -> None:
        self.custom = k8s.CustomObjectsApi(sandbox.api_client)
        self.processes: dict[str, OperatorProcess] = {}
        for name in ("replica-a", "replica-b"):
            env = operator_env(sandbox, folder / name) | {
                "TPUJOB_PEERING": PEERING,
                "TPUJOB_PEERING_LIFETIME_SECONDS": str(LIFETIME_SECONDS),
                "TPUJOB_PEERING_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE_SECONDS),
                "POD_ID": name,
                **settings.get(name, {}),
            }
            self.processes[name] = OperatorProcess(env, folder / f"{name}.log")

    def log(self, name: str) -> str:
        return self.processes[name].log()

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
def replica_settings() -> dict[str, dict[str, str]]:
    """TPUJOB_* settings per replica beyond the chart's defaults; none unless a test overrides this."""
    return {}


@pytest.fixture
def replicas(
    sandbox: Sandbox,
    namespace: str,
    operator: OperatorProcess,
    gke: GkeSimulator,
    tmp_path: Path,
    replica_settings: dict[str, dict[str, str]],
) -> Iterator[tuple[Replicas, Jobs]]:
    """The session's single operator steps aside for two peered replicas; after the test, the replicas
    still alive delete its jobs (finalizers and all) before it comes back."""
    install_crd(sandbox)
    install_peering_crds(sandbox)
    for name in ("replica-a", "replica-b"):
        (tmp_path / name).mkdir()
    operator.kill()
    pair = Replicas(sandbox, tmp_path, replica_settings)
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
    active = wait_for(
        lambda: pair.active(set(pair.processes)),
        timeout=STARTUP_SECONDS,
        what="one active replica of two",
        last_state=pair.peers,
    )
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
    # One pod per host, each of attempt 0 (listed now: on success they go with the pools).
    assert {p.metadata.labels[c.LABEL_ATTEMPT] for p in jobs.pods("provisioning")} == {"0"}
    assert len(jobs.pods("provisioning")) == 4
    for pod in pods:
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    final = jobs.wait_phase("provisioning", "Succeeded", timeout=60)
    assert final.get("restarts", 0) == 0
    # Exactly one create per pool, across both replicas and the takeover.
    assert gke.calls["CreateNodePool"] == 2


def now_active_lines(pair: Replicas) -> int:
    return sum(pair.log(name).count("is now active") for name in pair.processes)


def test_only_one_of_two_replicas_starting_together_acts(replicas):
    """Both start at once, each with its own random priority: the one that outranks works, and the other
    never acts, not even for the moment before it has read its peer's record."""
    pair, _ = replicas
    wait_for(
        lambda: pair.active(set(pair.processes)),
        timeout=STARTUP_SECONDS,
        what="one active replica of two",
        last_state=pair.peers,
    )
    # Three more reads of the peering object by each replica: a second "now active" would be in by then.
    settled = time.monotonic() + 3 * LIFETIME_SECONDS / 5
    wait_for(lambda: time.monotonic() > settled and now_active_lines(pair) >= 1, timeout=30, what="the reads")
    assert now_active_lines(pair) == 1, {name: pair.log(name)[-2000:] for name in pair.processes}


HIGH, LOW = "replica-a", "replica-b"


@pytest.mark.parametrize(
    "replica_settings",
    # Fixed priorities, so the failback is certain: the high one outranks the low one whenever both live.
    # The periodic sweep is an hour away: only a takeover sweeps in this test.
    [{HIGH: {"TPUJOB_PEERING_PRIORITY": "200", "TPUJOB_SWEEP_SECONDS": "3600"},
      LOW: {"TPUJOB_PEERING_PRIORITY": "100", "TPUJOB_SWEEP_SECONDS": "3600"}}],
)  # fmt: skip
def test_a_takeover_creates_nothing_for_jobs_deleted_while_it_stood_by_and_sweeps_orphans(
    replicas, gke, kubelet, core, custom
):
    """Failover (the high replica killed: the low one takes over and caches every job), failback (the high
    one back: the low one stands by, its watches paused), two jobs deleted meanwhile (one through the
    finalizer, one whose finalizer the API server lost), a pool left by nobody's job, then a rolling stop
    of the high one: the low one takes over with a cache that still holds both deleted jobs, and sweeps."""
    pair, jobs = replicas
    wait_for(
        lambda: pair.active(set(pair.processes)) == HIGH,
        timeout=STARTUP_SECONDS,
        what="the high replica active",
        last_state=pair.peers,
    )
    for name in ("kept", "deleted", "leaked"):
        jobs.create(plain_job(name, tpu={"type": "v5e", "topology": "2x2"}))
    for name in ("kept", "deleted", "leaked"):
        jobs.wait_pods_running(name, 1, timeout=60)
    pools = {name: jobs.status(name)["nodePools"][0]["name"] for name in ("kept", "deleted", "leaked")}

    # The low replica may have been active for a moment at start (before the high one's record): the waits
    # count its words from here.
    activated, stood_by = said(pair.log(LOW), "is now active"), said(pair.log(LOW), "is now standby")
    pair.processes[HIGH].kill()  # failover
    wait_for(lambda: pair.active({LOW}), timeout=30, what="the low replica alone")
    wait_for(lambda: said(pair.log(LOW), "is now active") > activated, timeout=30,
             what="the low replica acting")  # fmt: skip
    pair.processes[HIGH].start()  # failback
    wait_for(lambda: said(pair.log(LOW), "is now standby") > stood_by, timeout=30,
             what="the low replica standing by")  # fmt: skip

    jobs.delete("deleted")
    wait_for(lambda: jobs.gone("deleted") and pools["deleted"] not in gke.node_pools(), timeout=60,
             what="the deleted job and its pool gone")  # fmt: skip
    # The API server can drop a finalizer it acknowledged when a DELETE raced the patch
    # (kubernetes/kubernetes#77988): here it is removed by hand. The active replica deletes the pool on the
    # job's DELETED event, not at its next sweep, an hour away.
    custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, jobs.namespace, c.PLURAL, "leaked", {"metadata": {"finalizers": None}}
    )
    jobs.delete("leaked")
    wait_for(lambda: jobs.gone("leaked") and pools["leaked"] not in gke.node_pools(), timeout=30,
             what="the leaked job gone and its pool with it, before any sweep")  # fmt: skip
    assert "deleted without its finalizer's release" in pair.log(HIGH)
    # A pool labelled for a job that never existed here (a process killed between its create and its record,
    # on another cluster's API server): only a sweep can find it.
    orphan = orphan_pool(gke, jobs.namespace)
    creates = gke.calls["CreateNodePool"]

    pair.processes[HIGH].stop()  # a rolling update's stop
    wait_for(lambda: pair.log(LOW).count("is now active") == 2, timeout=30, what="the low replica back")
    wait_for(lambda: orphan not in gke.node_pools(), timeout=30, what="the orphan pool swept")
    (pod,) = jobs.wait_pods_running("kept", 1, timeout=30)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("kept", "Succeeded", timeout=60)
    # Nothing was created for either deleted job: no pool, no pod.
    assert gke.calls["CreateNodePool"] == creates
    assert not {pools["deleted"], pools["leaked"], orphan} & set(gke.node_pools())
    assert not jobs.pods("deleted") and not jobs.pods("leaked")


def orphan_pool(gke: GkeSimulator, namespace: str) -> str:
    """A pool with the operator's labels, for a job UID no API server has, made through GKE's API."""
    name = "tj-orphan-000000-0"
    labels = {
        c.POOL_LABEL_MANAGED_BY: c.MANAGED_BY,
        c.POOL_LABEL_NAMESPACE: namespace,
        c.POOL_LABEL_JOB: "orphan",
        c.POOL_LABEL_JOB_UID: "00000000-0000-0000-0000-000000000000",
    }
    pool = {
        "name": name,
        "initialNodeCount": 1,
        "locations": [gke.cluster_model.default_node_zones[0]],
        "config": {"machineType": "ct5lp-hightpu-4t", "labels": labels},
    }
    request = container_v1.NodePool.from_json(json.dumps(pool))
    gke.client().create_node_pool(parent=gke.parent, node_pool=request)
    wait_for(lambda: name in gke.node_pools(), timeout=10, what="the orphan pool")
    return name


V5P_MULTI_HOST = {"type": "v5p", "topology": "2x2x2"}  # 2 hosts in us-central1-a, the operator's zone


def test_killed_right_after_gke_accepts_a_re_requested_pool_the_next_process_leaves_gke_retrying_it(
    operator, jobs, gke, kubelet
):
    """GKE gives up on a stockout, the operator deletes the pool and asks again, and dies the instant GKE
    accepts the second create, before recording it. The next process must judge the pool by its newest
    create (GKE still retrying it), not by the finished one in the status: no DeleteNodePool while GKE
    retries, and the job says Stockout throughout."""
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", 0)
    gke.pools.retry_window_seconds = 600  # GKE gives up on the first create after 10 minutes (1.2 s here)

    def die() -> None:
        gke.pools.retry_window_seconds = 7200  # the second create: GKE retries for 2 hours (14.4 s here)
        operator.kill()

    gke.on_accepted("CreateNodePool", die, nth=2)
    jobs.create(plain_job("again", tpu=V5P_MULTI_HOST))
    wait_for(lambda: gke.calls["CreateNodePool"] == 2 and operator not in OperatorProcess.running,
             timeout=60, what="the second create and the kill")  # fmt: skip
    deletes = gke.calls["DeleteNodePool"]  # the first pool's, after GKE gave up on it
    pool = jobs.status("again")["nodePools"][0]["name"]
    attempts = gke.pools.attempts[pool]

    operator.start()

    def retrying_without_deletes() -> bool:
        assert gke.calls["DeleteNodePool"] == deletes, "the new process deleted a pool GKE is retrying"
        assert jobs.status("again").get("reason") == "Stockout"
        # 10 more attempts by GKE (4 minutes of GKE time each, 4.8 s here): several passes of the new process.
        return gke.pools.attempts[pool] >= attempts + 10

    wait_for(retrying_without_deletes, timeout=60, interval=0.1, what="GKE retrying, no delete")
    gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", None)  # capacity is back
    for pod in jobs.wait_pods_running("again", 2, timeout=60):
        kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("again", "Succeeded", timeout=60)
    assert gke.calls["CreateNodePool"] == 2


class TestPartition:
    """The high replica reaches the API server through a proxy that black-holes its traffic, then heals;
    its GKE calls go through a proxy that is never cut, which notes when it sends."""

    @pytest.fixture
    def proxies(self, sandbox: Sandbox) -> Iterator[tuple[PartitionProxy, PartitionProxy]]:
        api_host, api_port = urllib.parse.urlsplit(sandbox.api_client.configuration.host).netloc.split(":")
        gke_host, gke_port = urllib.parse.urlsplit(sandbox.gke.endpoint).netloc.split(":")
        api = PartitionProxy((api_host, int(api_port))).start()
        gke = PartitionProxy((gke_host, int(gke_port))).start()
        yield api, gke
        api.stop()
        gke.stop()

    @pytest.fixture
    def replica_settings(self, sandbox, proxies, tmp_path) -> dict[str, dict[str, str]]:
        api, gke = proxies
        kubeconfig = operator_kubeconfig(sandbox, tmp_path / "through-the-proxy")
        config = yaml.safe_load(kubeconfig.read_text())
        for cluster in config["clusters"]:  # the same TLS endpoint, reached through the proxy's port
            server = urllib.parse.urlsplit(cluster["cluster"]["server"])
            cluster["cluster"]["server"] = f"https://{server.hostname}:{api.port}"
        kubeconfig.write_text(yaml.safe_dump(config))
        return {
            HIGH: {
                "TPUJOB_PEERING_PRIORITY": "200",
                "KUBECONFIG": str(kubeconfig),
                "TPUJOB_GKE_ENDPOINT": f"http://127.0.0.1:{gke.port}",
            },
            LOW: {"TPUJOB_PEERING_PRIORITY": "100"},
        }

    def test_a_partition_stops_the_cut_off_replica_before_the_standby_takes_over_and_it_rejoins_as_standby(
        self, replicas, proxies, gke, kubelet
    ):
        pair, jobs = replicas
        api, gke_traffic = proxies
        wait_for(
            lambda: pair.active(set(pair.processes)) == HIGH,
            timeout=STARTUP_SECONDS,
            what="the high replica active",
            last_state=pair.peers,
        )
        jobs.create(plain_job("running", tpu={"type": "v5e", "topology": "2x2"}))
        (running_pod,) = jobs.wait_pods_running("running", 1, timeout=60)
        gke.inject_pool_fault("slow", provisioning_seconds=20 / gke.time_scale)  # PROVISIONING at the cut
        jobs.create(plain_job("provisioning", tpu={"type": "v5p", "topology": "2x2x4"}))
        jobs.wait_phase("provisioning", "Provisioning", timeout=30)
        assert gke.calls["CreateNodePool"] == 2

        # The low replica may have been active for a moment at start, before the high one's record: its
        # takeover is the next "is now active" it says from here.
        activated = said(pair.log(LOW), "is now active")
        api.cut()
        wait_for(
            lambda: "could not confirm its lead" in pair.log(HIGH),
            timeout=30,
            what="the high one standing down",
        )
        stood_down_at = time.monotonic()
        wait_for(lambda: said(pair.log(LOW), "is now active") > activated, timeout=30,
                 what="the standby taking over")  # fmt: skip
        # It stopped before the standby could take over (its record is live for a lifetime after its last
        # write), and from then on it calls GKE no more, though GKE is still within its reach. The order is
        # the one the two logs' timestamps say (one clock): when the test reads them is no measure of it.
        assert logged_at(pair.log(HIGH), "could not confirm its lead") < logged_at(
            pair.log(LOW), "is now active", nth=activated
        )
        kubelet.succeed(jobs.namespace, running_pod.metadata.name)
        jobs.wait_phase("running", "Succeeded", timeout=60)
        for pod in jobs.wait_pods_running("provisioning", 4, timeout=90):
            kubelet.succeed(jobs.namespace, pod.metadata.name)
        jobs.wait_phase("provisioning", "Succeeded", timeout=60)
        assert gke_traffic.sent_since(stood_down_at) == 0, (
            "the cut-off replica called GKE after standing down"
        )
        assert gke.calls["CreateNodePool"] == 2  # one create per pool, across the partition

        api.heal()
        # It rejoins under the replica that took over, and writes nothing to the jobs it left.
        # The healed replica's watches and peering writes come back through kopf's reconnect backoff, which
        # under two pytest workers took longer than 30 s once.
        wait_for(
            lambda: pair.active({HIGH, LOW}) == LOW,
            timeout=60,
            what="both live, the low one leading",
            last_state=pair.peers,
        )

        def settled_jobs() -> bool:
            # The leader records the pools' deletion (STOPPING, then Deleted): a write of its own, not the
            # healed replica's, which under load came inside the window below.
            statuses = [jobs.status(name) for name in ("running", "provisioning")]
            return all({p["state"] for p in st.get("nodePools") or []} <= {"Deleted"} for st in statuses)

        wait_for(settled_jobs, timeout=60, what="the leader to record both jobs' pools deleted")
        versions = {
            name: jobs.get(name)["metadata"]["resourceVersion"] for name in ("running", "provisioning")
        }
        settled = time.monotonic() + 3 * LIFETIME_SECONDS / 5  # three more reads of the peering object
        wait_for(
            lambda: time.monotonic() > settled and pair.active({HIGH, LOW}) == LOW, timeout=30, what="reads"
        )
        assert pair.log(HIGH).count("is now active") == 1  # once, before the partition
        assert {n: jobs.get(n)["metadata"]["resourceVersion"] for n in versions} == versions
