"""The TPU nodes' Google identity, safe by default: the operator says at start when the pools' nodes would
run as the Compute Engine default service account, and when the tenancy policy grants host networking
(the node's identity) where Workload Identity is off or the node account is the default one."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from google.cloud import container_v1

from tpujob import gke_cluster
from tpujob.api.tenancy import TenancyPolicy
from tpujob.reconciler.memory import JobMemory
from tpujob.reconciler.observe import Observer, Settings
from tpujob.records import JobRecords
from tpujob.render import Cluster

OWN = Cluster(node_service_account="tpu-nodes@p.iam.gserviceaccount.com")


def policy(**namespaces: dict[str, object]) -> TenancyPolicy:
    return TenancyPolicy.model_validate({"namespaces": namespaces})


def test_nodes_without_an_account_of_their_own_are_named_with_the_fix():
    warning = gke_cluster.node_account_warning(Cluster())
    assert "Compute Engine default service account" in warning and "cloud-platform" in warning
    assert gke_cluster.LEAST_PRIVILEGE_NODE_ROLE in warning and "gke.nodeServiceAccount" in warning
    assert gke_cluster.node_account_warning(OWN) == ""


@pytest.mark.parametrize(
    ("tenancy", "cluster", "workload_identity", "says"),
    [
        pytest.param(policy(), Cluster(), False, None, id="nobody granted hostNetwork"),
        pytest.param(
            policy(**{"team-a": {"hostNetwork": True}, "team-b": {}}),
            OWN,
            False,
            ["namespace team-a,", "without Workload Identity"],
            id="one namespace, Workload Identity off",
        ),
        pytest.param(
            TenancyPolicy.model_validate({"defaults": {"hostNetwork": True}}),
            OWN,
            False,
            ["every namespace", "without Workload Identity"],
            id="the defaults grant it",
        ),
        pytest.param(
            policy(**{"team-a": {"hostNetwork": True}}),
            Cluster(),
            True,
            ["Compute Engine default service account"],
            id="Workload Identity on, default node account",
        ),
        pytest.param(policy(**{"team-a": {"hostNetwork": True}}), OWN, True, None, id="both safe"),
    ],
)
def test_granting_host_network_warns_when_the_nodes_identity_is_not_safe_to_share(
    tenancy, cluster, workload_identity, says
):
    warning = gke_cluster.host_network_warning(tenancy, cluster, workload_identity)
    if says is None:
        assert warning == ""
    else:
        assert all(part in warning for part in says), warning
        assert "take hostNetwork back" in warning


class Clusters:
    """GKE's GetCluster, as container_v1 answers it."""

    def __init__(self, workload_pool: str) -> None:
        self.workload_pool = workload_pool

    def get_cluster(self, name: str, timeout: float) -> container_v1.Cluster:
        return container_v1.Cluster(
            name=name,
            location="us-central1",
            locations=["us-central1-a"],
            workload_identity_config=container_v1.WorkloadIdentityConfig(workload_pool=self.workload_pool),
            current_master_version="1.33.1-gke.1",
        )


@pytest.mark.parametrize(("workload_pool", "warned"), [("", True), ("p.svc.id.goog", False)])
def test_the_operator_says_it_at_start_when_getcluster_shows_workload_identity_off(
    workload_pool, warned, caplog
):
    settings = Settings(tenancy=policy(**{"team-a": {"hostNetwork": True}}))
    cluster = Cluster(zone="us-central1-a", node_service_account=OWN.node_service_account)
    pools = SimpleNamespace(client=Clusters(workload_pool), timeout=5.0)
    observer = Observer(cluster, None, pools, JobMemory(JobRecords()), settings)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        assert observer.check_cluster() is not None
    assert ("grants hostNetwork to namespace team-a" in caplog.text) is warned
