"""A namespace's workers' NetworkPolicy as rendered: its pods, its peers, its ports (render/network.py)."""

from __future__ import annotations

from tests.manifests import base_job
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.render import Cluster, render_plan
from tpujob.render.network import NAMESPACE_POLICY_NAME, network_policy

PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
OPERATOR = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tpujob-system"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "tpujob-operator"}},
}


def job(name: str = "train", namespace: str = "ml", uid: str = "uid-1", **spec):
    manifest = base_job(name, **spec)
    manifest["metadata"] = {"name": name, "namespace": namespace, "uid": uid}
    return parse_tpujob(manifest)


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A LabelSelector's verdict, for the two forms the policy may use (matchLabels, Exists)."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] == "Exists", expression
        if expression["key"] not in labels:
            return False
    return True


def pods_of(plan) -> list[dict]:
    return [r for r in plan.resources if r["kind"] == "Pod"]


def test_the_policy_guards_every_worker_of_every_job_of_its_namespace_and_no_other_pod():
    multislice = job(tpu={"type": "v6e", "topology": "4x4", "slices": 2})
    neighbour = job("train-2", uid="uid-2")
    policy = network_policy("ml", [OPERATOR, PROMETHEUS])
    assert (policy["apiVersion"], policy["kind"]) == ("networking.k8s.io/v1", "NetworkPolicy")
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == (NAMESPACE_POLICY_NAME, "ml")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]  # egress stays open (GCS, the coordinator's DNS, ...)
    mine, theirs = pods_of(render_plan(multislice, Cluster())), pods_of(render_plan(neighbour, Cluster()))
    assert len(mine) == 8
    assert all(selects(spec["podSelector"], p["metadata"]["labels"]) for p in mine + theirs)
    # A pod of the namespace that is no TPUJob's worker (a notebook, a web app) is not selected.
    assert not selects(spec["podSelector"], {"app": "notebook", c.LABEL_MANAGED_BY: c.MANAGED_BY})


def test_the_namespace_s_workers_reach_every_port_and_the_scrapers_only_the_metrics_port():
    policy = network_policy("ml", [OPERATOR, PROMETHEUS])
    workers, metrics = policy["spec"]["ingress"]
    # Every port the workers talk on (8471 TPU runtime, 8470 TensorFlow, 8080 Multislice coordinator, 8476
    # JAX's coordinator, the team's own), from this namespace's workers only: no `ports`, one pod selector,
    # no namespace selector (so this namespace only).
    assert workers == {"from": [{"podSelector": policy["spec"]["podSelector"]}]}
    assert metrics == {"from": [OPERATOR, PROMETHEUS], "ports": [{"protocol": "TCP", "port": 9090}]}
    assert metrics["ports"][0]["port"] == c.PORT_TRAINER_METRICS
    # The port the pods declare as metrics is the one admitted.
    (pod, *_) = pods_of(render_plan(job(), Cluster()))
    declared = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert declared[c.METRICS_PORT_NAME] == c.PORT_TRAINER_METRICS


def test_without_scrapers_only_the_namespace_s_workers_get_in():
    (rule,) = network_policy("ml")["spec"]["ingress"]
    assert set(rule) == {"from"}


def test_the_policy_is_no_job_s_so_no_job_s_deletion_opens_the_others():
    metadata = network_policy("ml")["metadata"]
    assert "ownerReferences" not in metadata  # it goes with its namespace
    assert metadata["labels"] == {c.LABEL_MANAGED_BY: c.MANAGED_BY}


def test_the_plan_carries_the_policy_unless_the_setting_is_off():
    kinds = [r["kind"] for r in render_plan(job(), Cluster(metrics_from=(PROMETHEUS,))).resources]
    assert kinds.count("NetworkPolicy") == 1
    policy = render_plan(job(), Cluster(metrics_from=(PROMETHEUS,))).resources[-1]
    assert policy["metadata"]["namespace"] == "ml"
    assert policy["spec"]["ingress"][1]["from"] == [PROMETHEUS]
    assert "NetworkPolicy" not in [
        r["kind"] for r in render_plan(job(), Cluster(network_policy=False)).resources
    ]


def test_worker_pods_mount_no_api_token_unless_the_job_asks():
    (pod,) = pods_of(render_plan(job(), Cluster()))
    assert pod["spec"]["automountServiceAccountToken"] is False
    asked = job(trainer={"image": "t:1", "automountServiceAccountToken": True})
    (pod,) = pods_of(render_plan(asked, Cluster()))
    assert pod["spec"]["automountServiceAccountToken"] is True


def test_the_shipped_trainer_runs_as_non_root_unless_the_job_says_otherwise():
    (pod,) = pods_of(render_plan(job(trainer={"image": "tpujob-trainer:0.1.0-tpu"}), Cluster()))
    assert pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is True
    (pod,) = pods_of(render_plan(job(trainer={"image": "us-docker.pkg.dev/p/r/maxtext:1"}), Cluster()))
    assert "runAsNonRoot" not in pod["spec"]["containers"][0]["securityContext"]  # another image's user
    explicit = {"image": "tpujob-trainer:0.1.0-tpu", "securityContext": {"runAsNonRoot": False}}
    (pod,) = pods_of(render_plan(job(trainer=explicit), Cluster()))
    assert pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] is False
