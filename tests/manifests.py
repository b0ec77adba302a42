"""Manifests shared by the unit tests and the end-to-end tests: one valid base, the end-to-end tests' job
with a plain image, and the malformed table."""

from __future__ import annotations

import copy
from typing import Any


def base_job(name: str = "train", **spec_overrides: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "tpujob.dev/v1alpha1",
        "kind": "TPUJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "tpu": {"type": "v5e", "topology": "2x2"},
            "trainer": {"image": "tpujob-trainer:test", "args": ["--steps", "10"]},
        },
    }
    job["spec"].update(spec_overrides)
    return job


# An image the simulated kubelet runs no process for: a pod of it runs until the test ends it through the
# kubelet (kubelet.succeed/fail/exit, preemption). End-to-end jobs use it unless a test proves the trainer's
# contract with the operator (the test bed's `trainer_image` fixture, marked `trainer`).
PLAIN_IMAGE = "registry.example/sleeper:1"


# The real trainer's flags for a test of its contract with the operator (steps, checkpoints, progress,
# signals), not of its learning: the smallest batch and no evaluation. A step costs mostly Python's dispatch,
# so a batch of 8 steps about as fast as one of 64 for a third less CPU (2,000 steps: 19 s of CPU against
# 30 s, 2026-11-29), and on the 2-core machine `make test` is bound by CPU.
LIGHT_TRAINING = ["--batch-size", "8", "--evaluate", "false"]


def plain_job(name: str = "train", **spec_overrides: Any) -> dict[str, Any]:
    """base_job() whose pods run no process on the test bed."""
    return base_job(name, **{"trainer": {"image": PLAIN_IMAGE}, **spec_overrides})


def with_change(path: str, value: Any, *, delete: bool = False) -> dict[str, Any]:
    """base_job() with the field at a dotted path set (or deleted)."""
    job = copy.deepcopy(base_job())
    *parents, leaf = path.split(".")
    node = job
    for part in parents:
        node = node.setdefault(part, {})
    if delete:
        node.pop(leaf)
    else:
        node[leaf] = value
    return job


# (id, manifest, field path the first problem must name, a fragment of the message saying what is allowed)
MALFORMED: list[tuple[str, Any, str, str]] = [
    ("unknown-tpu-type", with_change("spec.tpu.type", "v3"), "spec.tpu.type", "valid: v4, v5e"),
    ("tpu-type-wrong-case", with_change("spec.tpu.type", "V5E"), "spec.tpu.type", "valid: v4, v5e"),
    ("3d-topology-on-2d", with_change("spec.tpu.topology", "2x2x1"), "spec.tpu.topology", "v5e takes AxB"),
    (
        "2d-topology-on-3d",
        with_change("spec.tpu", {"type": "v5p", "topology": "2x2"}),
        "spec.tpu.topology",
        "v5p takes AxBxC",
    ),
    ("nonexistent-topology", with_change("spec.tpu.topology", "3x3"), "spec.tpu.topology", "valid: 1x1, 2x2"),
    (
        "topology-too-big",
        with_change("spec.tpu.topology", "16x32"),
        "spec.tpu.topology",
        "more than the largest",
    ),
    ("topology-garbage", with_change("spec.tpu.topology", "big"), "spec.tpu.topology", "e.g. 2x2 or 2x2x4"),
    ("topology-not-string", with_change("spec.tpu.topology", 4), "spec.tpu.topology", "string"),
    (
        "topology-missing",
        with_change("spec.tpu.topology", None, delete=True),
        "spec.tpu.topology",
        "required",
    ),
    ("slices-zero", with_change("spec.tpu.slices", 0), "spec.tpu.slices", "greater than or equal to 1"),
    ("slices-negative", with_change("spec.tpu.slices", -2), "spec.tpu.slices", "greater than or equal to 1"),
    ("slices-not-int", with_change("spec.tpu.slices", "two"), "spec.tpu.slices", "integer"),
    (
        "multislice-single-host",
        with_change("spec.tpu.slices", 2),
        "spec.tpu.slices",
        "need multi-host slices",
    ),
    (
        "multislice-on-one-8-chip-host",
        with_change("spec.tpu", {"type": "v6e", "topology": "2x4", "slices": 2}),
        "spec.tpu.slices",
        "set spec.tpu.machineType: ct6e-standard-4t",
    ),
    (
        "tensorflow-on-tpu7x",
        with_change("spec.tpu", {"type": "tpu7x", "topology": "1x1x1"}),
        "spec.trainer.image",
        "TensorFlow does not run on tpu7x",
    ),
    (
        "v5p-dimensions-descending",
        with_change("spec.tpu", {"type": "v5p", "topology": "4x2x2"}),
        "spec.tpu.topology",
        "write the dimensions ascending (2x2x4)",
    ),
    (
        "multislice-on-one-8-chip-v5e-host",
        with_change("spec.tpu", {"type": "v5e", "topology": "2x4", "slices": 2}),
        "spec.tpu.slices",
        "set spec.tpu.machineType: ct5lp-hightpu-4t (2 hosts of 4 chips)",
    ),
    (
        "tensorflow-registry-image-on-multi-host-tpu7x",
        with_change(
            "spec",
            {
                "tpu": {"type": "tpu7x", "topology": "2x2x2"},
                "nodePool": {"workloadPolicy": "wp-1"},
                "trainer": {"image": "us-docker.pkg.dev/p/repo/tpujob-trainer:0.1.0-tpu"},
            },
        ),
        "spec.trainer.image",
        "use a JAX or PyTorch/XLA image",
    ),
    (
        "v4-small-shape-turned",
        with_change("spec.tpu", {"type": "v4", "topology": "4x2x2"}),
        "spec.tpu.topology",
        "AxBxC in any order each a multiple of 4",
    ),
    (
        "tpu7x-dimensions-descending",
        with_change("spec.tpu", {"type": "tpu7x", "topology": "8x4x4"}),
        "spec.tpu.topology",
        "write the dimensions ascending (4x4x8)",
    ),
    (
        "tpu7x-one-chip-machine-on-a-larger-topology",
        with_change("spec.tpu", {"type": "tpu7x", "topology": "2x2x1", "machineType": "tpu7x-standard-1t"}),
        "spec.tpu.machineType",
        "serves only topology 1x1x1",
    ),
    (
        "max-pods-per-node-too-large",
        with_change("spec.nodePool", {"maxPodsPerNode": 512}),
        "spec.nodePool.maxPodsPerNode",
        "less than or equal to 256",
    ),
    (
        "oauth-scopes-are-the-operators",
        with_change("spec.nodePool", {"oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"]}),
        "spec.nodePool.oauthScopes",
        "node pools' OAuth scopes are the operator's setting (the chart's gke.nodeOAuthScopes)",
    ),
    ("gvnic-not-bool", with_change("spec.nodePool", {"gvnic": "fast"}), "spec.nodePool.gvnic", "boolean"),
    (
        "max-pods-per-node-too-small",
        with_change("spec.nodePool", {"maxPodsPerNode": 4}),
        "spec.nodePool.maxPodsPerNode",
        "greater than or equal to 8",
    ),
    (
        "provisioning-timeout-zero",
        with_change("spec.runPolicy", {"provisioningTimeoutSeconds": 0}),
        "spec.runPolicy.provisioningTimeoutSeconds",
        "greater than or equal to 1",
    ),
    (
        "flex-start-on-v4",
        with_change(
            "spec",
            {
                **base_job()["spec"],
                "tpu": {"type": "v4", "topology": "2x2x2"},
                "capacity": {"mode": "flexStart"},
            },
        ),
        "spec.capacity.mode",
        "flexStart offers v5e, v5p, v6e, tpu7x TPUs, not v4",
    ),
    (
        "max-run-duration-without-flex-start",
        with_change("spec.capacity", {"mode": "spot", "maxRunDurationSeconds": 3600}),
        "spec.capacity.maxRunDurationSeconds",
        "only used when mode is flexStart",
    ),
    (
        "max-run-duration-over-7-days",
        with_change("spec.capacity", {"mode": "flexStart", "maxRunDurationSeconds": 8 * 24 * 3600}),
        "spec.capacity.maxRunDurationSeconds",
        "less than or equal to 604800",
    ),
    (
        "zone-without-the-tpu",
        with_change("spec.nodePool", {"zone": "us-central1-b"}),
        "spec.nodePool.zone",
        "us-central1-b does not offer v5e TPUs; zones that do: us-central1-a",
    ),
    (
        "fallback-zone-without-the-tpu",
        with_change("spec.capacity", {"zones": ["us-central1-a", "us-east5-a"]}),
        "spec.capacity.zones[1]",
        "us-east5-a does not offer v5e TPUs",
    ),
    (
        "one-zone-and-a-zone-list",
        with_change(
            "spec",
            {
                **base_job()["spec"],
                "nodePool": {"zone": "us-central1-a"},
                "capacity": {"zones": ["us-central1-a"]},
            },
        ),
        "spec.capacity.zones",
        "set either spec.nodePool.zone",
    ),
    (
        "machine-type-wrong-generation",
        with_change("spec.tpu.machineType", "ct4p-hightpu-4t"),
        "spec.tpu.machineType",
        "valid: ct5lp-hightpu-1t",
    ),
    (
        "machine-type-too-small",
        with_change("spec.tpu.machineType", "ct5lp-hightpu-1t"),
        "spec.tpu.machineType",
        "serves only topology 1x1",
    ),
    (
        "reservation-mode-without-name",
        with_change("spec.capacity", {"mode": "reservation"}),
        "spec.capacity.reservation",
        "required when mode is reservation: the reservation's name, or projects/PROJECT/reservations/NAME",
    ),
    (
        "reservation-name-without-mode",
        with_change("spec.capacity", {"mode": "spot", "reservation": "r1"}),
        "spec.capacity.reservation",
        "only used when mode is reservation",
    ),
    (
        "unknown-capacity-mode",
        with_change("spec.capacity", {"mode": "preemptible"}),
        "spec.capacity.mode",
        "spot",
    ),
    (
        "shared-reservation-bad-project",
        with_change("spec.capacity", {"mode": "reservation", "reservation": "projects/p/reservations/r1"}),
        "spec.capacity.reservation",
        "or projects/PROJECT/reservations/NAME for one shared from another project",
    ),
    (
        "shared-reservation-wrong-collection",
        with_change(
            "spec.capacity", {"mode": "reservation", "reservation": "projects/other-project/zones/r1"}
        ),
        "spec.capacity.reservation",
        "write the reservation's name",
    ),
    (
        "reservation-bad-name",
        with_change("spec.capacity", {"mode": "reservation", "reservation": "My_Res"}),
        "spec.capacity.reservation",
        "or projects/PROJECT/reservations/NAME",
    ),
    (
        "unknown-pool-policy",
        with_change("spec.nodePool", {"policy": "reuse"}),
        "spec.nodePool.policy",
        "existing",
    ),
    (
        "zone-with-existing-pools",
        with_change("spec.nodePool", {"policy": "existing", "zone": "us-east5-a"}),
        "spec.nodePool.zone",
        "only used with policy create",
    ),
    (
        "tpu7x-multihost-without-workload-policy",
        with_change("spec.tpu", {"type": "tpu7x", "topology": "2x2x2"}),
        "spec.nodePool.workloadPolicy",
        "workload policy",
    ),
    (
        "deadline-negative",
        with_change("spec.runPolicy", {"activeDeadlineSeconds": -5}),
        "spec.runPolicy.activeDeadlineSeconds",
        "greater than or equal to 1",
    ),
    (
        "max-restarts-negative",
        with_change("spec.runPolicy", {"maxRestarts": -1}),
        "spec.runPolicy.maxRestarts",
        "greater than or equal to 0",
    ),
    (
        "ttl-negative",
        with_change("spec.runPolicy", {"ttlSecondsAfterFinished": -1}),
        "spec.runPolicy.ttlSecondsAfterFinished",
        "greater than or equal to 0",
    ),
    (
        "suspend-not-bool",
        with_change("spec.runPolicy", {"suspend": "maybe"}),
        "spec.runPolicy.suspend",
        "boolean",
    ),
    ("image-missing", with_change("spec.trainer.image", None, delete=True), "spec.trainer.image", "required"),
    ("image-empty", with_change("spec.trainer.image", ""), "spec.trainer.image", "at least 1 character"),
    ("trainer-missing", with_change("spec.trainer", None, delete=True), "spec.trainer", "required"),
    ("spec-missing", with_change("spec", None, delete=True), "spec", "required"),
    (
        "unknown-field-in-tpu",
        with_change("spec.tpu.topolgy", "2x2"),
        "spec.tpu.topolgy",
        "valid fields here: type",
    ),
    ("unknown-field-in-spec", with_change("spec.replicas", 3), "spec.replicas", "valid fields here: tpu"),
    (
        "tpu-resource-set-by-user",
        with_change("spec.trainer.resources", {"limits": {"google.com/tpu": "4"}}),
        "spec.trainer.resources.limits",
        "set by the operator",
    ),
    (
        "bad-quantity",
        with_change("spec.trainer.resources", {"requests": {"cpu": "lots"}}),
        "spec.trainer.resources.requests.cpu",
        "does not match",
    ),
    (
        "reserved-env",
        with_change("spec.trainer.env", [{"name": "TPU_WORKER_ID", "value": "3"}]),
        "spec.trainer.env[0].name",
        "set by the operator",
    ),
    (
        "reserved-tpu7x-env",
        with_change(
            "spec.trainer.env",
            [{"name": "A", "value": "1"}, {"name": "TPU_PROCESS_ADDRESSES", "value": "h:1"}],
        ),
        "spec.trainer.env[1].name",
        "TPU_PROCESS_ADDRESSES is set by the operator",
    ),
    (
        "reserved-tpu7x-port-env",
        with_change("spec.trainer.env", [{"name": "TPU_PROCESS_PORT", "value": "9000"}]),
        "spec.trainer.env[0].name",
        "TPU_PROCESS_PORT is set by the operator",
    ),
    ("env-not-list", with_change("spec.trainer.env", {"A": "1"}), "spec.trainer.env", "list"),
    (
        "command-not-list",
        with_change("spec.trainer.command", "python train.py"),
        "spec.trainer.command",
        "list",
    ),
    ("wrong-kind", with_change("kind", "Job"), "kind", "use TPUJob"),
    (
        "wrong-api-version",
        with_change("apiVersion", "tpujob.dev/v1"),
        "apiVersion",
        "use tpujob.dev/v1alpha1",
    ),
    ("name-too-long", with_change("metadata.name", "n" * 60), "metadata.name", "longer than 48 characters"),
    ("not-a-mapping", ["a", "list"], "(document)", "must be a mapping"),
]
