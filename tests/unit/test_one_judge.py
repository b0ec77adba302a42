"""One judge everywhere: every case of one table runs through `tpujob validate` / `tpujob render` and through
the operator's own pass (the Reconciler, against in-memory stand-ins for the API server and GKE), and both
give the same verdict naming the same field. `render` lists what the operator creates, in the order a pass
creates it. A rule that changes on one side only fails here."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests import base_job
from tests.unit.test_reconciler import RecordingKube, RecordingPools, job_body, reconciler
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api.tenancy import TenancyPolicy
from tpujob.cli import main
from tpujob.reconciler import Settings
from tpujob.render.workload import KueueApi


class KueueKube(RecordingKube):
    """RecordingKube with the reads and the create a queued job's first pass makes (a LocalQueue of no
    ClusterQueue named, no PriorityClass)."""

    def get_kueue_object(
        self, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        self._call("get_kueue_object", namespace or "", (plural, name))
        return None

    def list_priority_classes(self) -> list[dict[str, Any]]:
        return []

    def get_priority_class(self, name: str) -> dict[str, Any] | None:
        return None

    def create_workload(self, namespace: str, version: str, body: dict[str, Any]) -> bool:
        self._call("create_workload", namespace, body)
        return True


KUEUE_V019 = KueueApi("v1beta2", 18)


@dataclass(frozen=True)
class Case:
    name: str
    manifest: dict[str, Any]
    verdict: tuple[str, str]  # the operator's status after its first pass: (phase, reason)
    field: str = ""  # the field the refusal or the hold names ("": the job runs)
    policy: dict[str, Any] = dataclasses.field(default_factory=dict)  # TPUJOB_TENANCY_POLICY, `--policy FILE`
    kueue: bool = False  # TPUJOB_KUEUE, `--kueue`
    max_hosts: int = 4096  # TPUJOB_MAX_HOSTS_PER_JOB, `--max-hosts-per-job`


def job(namespace: str = "team-a", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    manifest = base_job(**spec)
    manifest["metadata"]["namespace"] = namespace
    if labels:
        manifest["metadata"]["labels"] = labels
    return manifest


def trainer(**security: Any) -> dict[str, Any]:
    return {"image": "tpujob-trainer:test", "securityContext": security}


QUEUED = {c.LABEL_QUEUE_NAME: "q"}
QUEUE_FIELD = f"metadata.labels['{c.LABEL_QUEUE_NAME}']"
TEAM_A_PRIVILEGED = {"namespaces": {"team-a": {"privileged": True}}}
REFUSED = ("Failed", "InvalidSpec")

CASES = [
    Case("plain", job(), ("Provisioning", "Provisioning")),
    Case(
        "privileged",
        job(trainer=trainer(privileged=True)),
        REFUSED,
        "spec.trainer.securityContext.privileged",
    ),
    Case(
        "sys-admin",
        job(trainer=trainer(capabilities={"add": ["SYS_ADMIN"]})),
        REFUSED,
        "spec.trainer.securityContext.capabilities.add[0]",
    ),
    Case("root", job(trainer=trainer(runAsUser=0)), REFUSED, "spec.trainer.securityContext.runAsUser"),
    Case(
        "host-network",
        job(trainer={"image": "tpujob-trainer:test", "hostNetwork": True}),
        REFUSED,
        "spec.trainer.hostNetwork",
    ),
    Case(
        "privileged-allowed-in-its-namespace",
        job(trainer=trainer(privileged=True)),
        ("Provisioning", "Provisioning"),
        policy=TEAM_A_PRIVILEGED,
    ),
    Case(
        "privileged-allowed-elsewhere",
        job("team-b", trainer=trainer(privileged=True)),
        REFUSED,
        "spec.trainer.securityContext.privileged",
        policy=TEAM_A_PRIVILEGED,
    ),
    Case(
        "more-chips-than-the-namespace-may-hold",
        job(tpu={"type": "v5e", "topology": "4x4"}),
        REFUSED,
        "spec.tpu",
        policy={"defaults": {"maxChips": 8}},
    ),
    Case(
        "startup-timeout-above-the-cap",
        job(runPolicy={"startupTimeoutSeconds": 7200}),
        REFUSED,
        "spec.runPolicy.startupTimeoutSeconds",
    ),
    Case(
        "grace-period-above-the-namespaces-cap",
        job(trainer={"image": "tpujob-trainer:test", "terminationGracePeriodSeconds": 600}),
        REFUSED,
        "spec.trainer.terminationGracePeriodSeconds",
    ),
    Case(
        "grace-period-the-namespace-allows",
        job(trainer={"image": "tpujob-trainer:test", "terminationGracePeriodSeconds": 600}),
        ("Provisioning", "Provisioning"),
        policy={"namespaces": {"team-a": {"maxTerminationGracePeriodSeconds": 900}}},
    ),
    Case("above-the-host-cap", job(tpu={"type": "v5e", "topology": "4x4"}), REFUSED, "spec.tpu", max_hosts=2),
    Case(
        "queue-required",
        job(),
        ("Queued", "QueueRequired"),
        QUEUE_FIELD,
        policy={"namespaces": {"team-a": {"requireQueue": True}}},
    ),
    Case("queued-without-kueue", job(labels=QUEUED), ("Queued", "KueueNotEnabled"), QUEUE_FIELD),
    Case("queued", job(labels=QUEUED), ("Queued", "WorkloadCreated"), kueue=True),
    Case(
        "queued-above-the-pod-set-cap",
        job(labels=QUEUED, tpu={"type": "v5e", "topology": "4x4", "slices": 19}),
        ("Failed", "InvalidForKueue"),
        "spec.tpu.slices",
        kueue=True,
    ),
]


def operator_first_pass(case: Case) -> tuple[dict[str, Any], list[str]]:
    """The status the operator's first pass writes for the job, and what it created (kinds, in order)."""
    api, pools = KueueKube(), RecordingPools()
    settings = Settings(
        tenancy=TenancyPolicy.model_validate(case.policy),
        kueue=case.kueue,
        max_hosts_per_job=case.max_hosts,
    )
    passes = reconciler(pools, api, settings)
    # Kueue v0.19's Workload API, found by discovery (the CLI is told with --kueue-pod-sets).
    passes.watched.set_kueue(KUEUE_V019, "")
    body = job_body(copy.deepcopy(case.manifest))
    passes.run(body, [], False, workloads=[])
    ((_, written),) = api.of("patch_tpujob_status")
    made = ["CreateNodePool"] * len(pools.created)
    made += [method.removeprefix("create_") for method, _, _ in api.calls if method == "create_workload"]
    return written["status"], made


def cli(case: Case, command: str, tmp_path: Path, *more: str) -> list[str]:
    path = tmp_path / f"{case.name}.yaml"
    manifest = copy.deepcopy(case.manifest)
    manifest["metadata"]["uid"] = "uid-1"  # as the API server gives it (the Workload's name hashes it)
    path.write_text(yaml.safe_dump(manifest))
    flags = ["--max-hosts-per-job", str(case.max_hosts), "--kueue-pod-sets", str(KUEUE_V019.max_pod_sets)]
    flags += ["--kueue"] if case.kueue else []
    if case.policy:
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump(case.policy))
        flags += ["--policy", str(policy)]
    return [str(main([command, str(path), *flags, *more])), str(path)]


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_cli_and_the_operator_give_the_same_verdict_naming_the_same_field(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, made = operator_first_pass(case)
    assert (status["phase"], status["reason"]) == case.verdict, status["message"]

    code, path = cli(case, "validate", tmp_path)
    err = capsys.readouterr().err
    lines = [line.removeprefix(f"{path}: ") for line in err.splitlines()]
    if not case.field:
        assert (code, lines) == ("0", [])
        assert made, "the operator made nothing for a job the CLI calls valid"
        return
    assert code == "1" and made == [], (lines, made)
    messages = [line.split(" (the operator would hold it: ")[0] for line in lines]
    if status["reason"] == "InvalidSpec":  # `FIELD: MESSAGE` each, as the operator's "; "-joined problems
        assert "; ".join(messages) == status["message"]
    else:  # a decision's one reason: the field to change, then the operator's words
        assert messages == [f"{case.field}: {status['message']}"]
    assert any(line.startswith(f"{case.field}: ") for line in lines), lines


@pytest.mark.parametrize(
    "case", [c for c in CASES if not c.field], ids=[c.name for c in CASES if not c.field]
)
def test_render_starts_with_what_the_operators_first_pass_creates(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, made = operator_first_pass(case)
    code, _ = cli(case, "render", tmp_path, "-o", "json")
    assert code == "0"
    plan = json.loads(capsys.readouterr().out)
    assert {key: plan["firstPass"][key] for key in ("phase", "reason")} == {
        "phase": status["phase"],
        "reason": status["reason"],
    }
    kinds = [o.get("kind") or o.get("gke") for o in plan["creates"]]
    assert [k.lower() for k in kinds[: len(made)]] == [k.lower() for k in made]


def test_render_lists_every_object_in_the_order_the_operators_passes_create_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two slices of 32 hosts (host lists in ConfigMaps): the first pass asks for the pools; once GKE has
    them, the next pass makes the namespace's NetworkPolicy, the ConfigMaps, the pods, then the Service."""
    manifest = job(tpu={"type": "v5p", "topology": "4x4x8", "slices": 2})
    api, pools = RecordingKube(), RecordingPools()
    passes = reconciler(pools, api)
    passes.run(job_body(copy.deepcopy(manifest)), [], False)
    for name in pools.states:
        pools.states[name] = "RUNNING"
    passes.run(job_body(copy.deepcopy(manifest)), [], False)
    operator = [("CreateNodePool", pool["name"]) for pool in pools.created]
    names = {"create_network_policy", "create_config_map", "create_service", "create_pod"}
    operator += [(b["kind"], b["metadata"]["name"]) for method, _, b in api.calls if method in names]

    code, _ = cli(Case("order", manifest, ("", "")), "render", tmp_path, "-o", "json")
    assert code == "0"
    plan = json.loads(capsys.readouterr().out)
    rendered = [
        ("CreateNodePool", o["nodePool"]["name"]) if o.get("gke") else (o["kind"], o["metadata"]["name"])
        for o in plan["creates"]
    ]
    # A batch of pods is created at once: in any order among them; the Service after them all.
    first_pod = next(i for i, (kind, _) in enumerate(operator) if kind == "Pod")
    assert rendered[:first_pod] == operator[:first_pod]
    assert sorted(rendered[first_pod:]) == sorted(operator[first_pod:])
    assert rendered[-1][0] == operator[-1][0] == "Service"
    assert len([k for k, _ in rendered if k == "Pod"]) == 2 * 32
    assert not s.TERMINAL_PHASES & {plan["firstPass"]["phase"]}
