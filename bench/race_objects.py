"""The objects each controller of bench/operator_bench.py is given or makes, all from the operator's own
render functions, so every controller creates the same pods."""

from __future__ import annotations

from typing import Any

from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.render import Cluster
from tpujob.render import plan as render
from tpujob.render.cluster import slice_shape


def tpujob_manifest(name: str, namespace: str, tpu: tuple[str, str], policy: str) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "tpu": {"type": tpu[0], "topology": tpu[1]},
            "nodePool": {"policy": policy},
            "trainer": {"image": "tpujob-trainer:bench", "args": ["--steps", "10"]},
        },
    }


def job_manifest(name: str, namespace: str, tpu: tuple[str, str], pods: int) -> dict[str, Any]:
    """A batch/v1 Job whose pod template is the operator's own rendered pod (worker 0) for the same job."""
    job = parse_tpujob(tpujob_manifest(name, namespace, tpu, "existing"))
    pod = render.pod(job, Cluster(), 0, 0)
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k != c.LABEL_MANAGED_BY}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def direct_objects(name: str, namespace: str, tpu: tuple[str, str]) -> list[dict[str, Any]]:
    """The headless Service and the pods the operator creates for a policy-existing job, in its order,
    without owner references: there is no TPUJob to own them (an owner that does not exist would have the
    garbage collector delete them). The namespace's workers' NetworkPolicy is made once per namespace, by its
    first job, not per job."""
    job = parse_tpujob(tpujob_manifest(name, namespace, tpu, "existing"))
    objects = [render.service(job), *render.pods(job, Cluster())]
    for body in objects:
        body["metadata"].pop("ownerReferences", None)
    return objects


def direct_job_of(pod: dict[str, Any]) -> str | None:
    """The job a directly created pod counts for: its job-name label (it has no owner)."""
    labels: dict[str, str] = pod["metadata"].get("labels") or {}
    return labels.get(c.LABEL_JOB_NAME)


def pods_per_job(tpu: tuple[str, str]) -> int:
    return slice_shape(parse_tpujob(tpujob_manifest("x", "x", tpu, "existing"))).hosts
