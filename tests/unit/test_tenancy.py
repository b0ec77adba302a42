"""The tenancy policy (api/tenancy.py): every escalation the default refuses, each named by its field path
with the setting that would allow it; the same job accepted where the namespace's policy allows it; the
policy's defaults and per-namespace overrides; and the test bed's policy as the operator reads it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.manifests import base_job
from tests.pod_manifests import SIDECAR
from tpujob.api import InvalidTPUJob, parse_tpujob
from tpujob.api.tenancy import NamespacePolicy, TenancyPolicy
from tpujob.config import OperatorConfig
from tpujob.render import Cluster
from tpujob.render.plan import pod as render_pod


def trainer(**fields: Any) -> dict[str, Any]:
    job = base_job()
    job["spec"]["trainer"].update(fields)
    return job


def sidecar_context(kind: str, **context: Any) -> dict[str, Any]:
    return base_job(pod={kind: [{**copy.deepcopy(SIDECAR), "securityContext": context}]})


# (id, manifest, the field path refused, the setting that allows it, and its value)
ESCALATIONS: list[tuple[str, dict[str, Any], str, str, Any]] = [
    ("host-network", trainer(hostNetwork=True), "spec.trainer.hostNetwork", "hostNetwork", True),
    (
        "trainer-privileged",
        trainer(securityContext={"privileged": True}),
        "spec.trainer.securityContext.privileged",
        "privileged",
        True,
    ),
    (
        "sidecar-privileged",
        sidecar_context("containers", privileged=True),
        "spec.pod.containers[0].securityContext.privileged",
        "privileged",
        True,
    ),
    (
        "init-container-privileged",
        sidecar_context("initContainers", privileged=True),
        "spec.pod.initContainers[0].securityContext.privileged",
        "privileged",
        True,
    ),
    (
        "trainer-escalation",
        trainer(securityContext={"allowPrivilegeEscalation": True}),
        "spec.trainer.securityContext.allowPrivilegeEscalation",
        "allowPrivilegeEscalation",
        True,
    ),
    (
        "sidecar-escalation",
        sidecar_context("containers", allowPrivilegeEscalation=True),
        "spec.pod.containers[0].securityContext.allowPrivilegeEscalation",
        "allowPrivilegeEscalation",
        True,
    ),
    (
        "trainer-root",
        trainer(securityContext={"runAsUser": 0}),
        "spec.trainer.securityContext.runAsUser",
        "runAsRoot",
        True,
    ),
    (
        "init-container-root",
        sidecar_context("initContainers", runAsUser=0),
        "spec.pod.initContainers[0].securityContext.runAsUser",
        "runAsRoot",
        True,
    ),
    (
        "pod-root",
        base_job(pod={"securityContext": {"runAsUser": 0}}),
        "spec.pod.securityContext.runAsUser",
        "runAsRoot",
        True,
    ),
    (
        "trainer-maybe-root",
        trainer(securityContext={"runAsNonRoot": False}),
        "spec.trainer.securityContext.runAsNonRoot",
        "runAsRoot",
        True,
    ),
    (
        "pod-maybe-root",
        base_job(pod={"securityContext": {"runAsNonRoot": False}}),
        "spec.pod.securityContext.runAsNonRoot",
        "runAsRoot",
        True,
    ),
    (
        "trainer-sys-admin",
        trainer(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE", "CAP_SYS_ADMIN"]}}),
        "spec.trainer.securityContext.capabilities.add[1]",
        "capabilities",
        ["NET_BIND_SERVICE", "SYS_ADMIN"],
    ),
    (
        "sidecar-net-admin",
        sidecar_context("containers", capabilities={"add": ["NET_ADMIN"]}),
        "spec.pod.containers[0].securityContext.capabilities.add[0]",
        "capabilities",
        ["CAP_NET_ADMIN"],
    ),
    (
        "existing-pools",
        base_job(nodePool={"policy": "existing"}),
        "spec.nodePool.policy",
        "existingPools",
        True,
    ),
    (
        "reservation-not-listed",
        base_job(capacity={"mode": "reservation", "reservation": "team-b-reservation"}),
        "spec.capacity.reservation",
        "reservations",
        ["team-b-reservation"],
    ),
    (
        "priority-class-not-listed",
        base_job(pod={"priorityClassName": "system-cluster-critical"}),
        "spec.pod.priorityClassName",
        "priorityClasses",
        ["system-cluster-critical"],
    ),
    (
        # Kueue's WorkloadPriorityClass: its Workload's priority, and so whom it may preempt.
        "workload-priority-class-not-listed",
        {
            **base_job(),
            "metadata": {"name": "train", "labels": {"kueue.x-k8s.io/priority-class": "production-critical"}},
        },
        "metadata.labels['kueue.x-k8s.io/priority-class']",
        "priorityClasses",
        ["production-critical"],
    ),
    (
        "startup-timeout-above-cap",
        base_job(runPolicy={"startupTimeoutSeconds": 86400}),
        "spec.runPolicy.startupTimeoutSeconds",
        "maxStartupTimeoutSeconds",
        86400,
    ),
    (
        "startup-timeout-below-floor",
        base_job(runPolicy={"startupTimeoutSeconds": 5}),
        "spec.runPolicy.startupTimeoutSeconds",
        "minStartupTimeoutSeconds",
        5,
    ),
    (
        "grace-period-above-cap",
        base_job(trainer={"image": "tpujob-trainer:test", "terminationGracePeriodSeconds": 600}),
        "spec.trainer.terminationGracePeriodSeconds",
        "maxTerminationGracePeriodSeconds",
        600,
    ),
    (
        "more-chips-than-the-namespace-may-hold",
        base_job(tpu={"type": "v5p", "topology": "2x2x4", "slices": 2}),  # 2 x 16 chips
        "spec.tpu",
        "maxChips",
        32,
    ),
]
# What only some policies refuse: the default lets these through.
STRICTER = {
    "existing-pools": {"existingPools": False},
    "reservation-not-listed": {"reservations": ["team-a-reservation"]},
    "priority-class-not-listed": {"priorityClasses": ["team-a-high"]},
    "workload-priority-class-not-listed": {"priorityClasses": ["team-a-high"]},
    "more-chips-than-the-namespace-may-hold": {"maxChips": 16},
}
IDS = [row[0] for row in ESCALATIONS]


def policy(namespaces: dict[str, Any] | None = None, **defaults: Any) -> TenancyPolicy:
    return TenancyPolicy.model_validate({"defaults": defaults, "namespaces": namespaces or {}})


@pytest.mark.parametrize(("name", "manifest", "path", "setting", "value"), ESCALATIONS, ids=IDS)
def test_refused_naming_the_field_and_the_setting_that_allows_it(name, manifest, path, setting, value):
    strict = policy(**STRICTER.get(name, {})).for_namespace("default")
    with pytest.raises(InvalidTPUJob) as caught:
        parse_tpujob(copy.deepcopy(manifest), tenancy=strict)
    problems = caught.value.problems
    assert [p.path for p in problems] == [path], [str(p) for p in problems]
    assert f"namespaces.default.{setting}" in problems[0].message
    assert "TPUJOB_TENANCY_POLICY" in problems[0].message


@pytest.mark.parametrize(("name", "manifest", "path", "setting", "value"), ESCALATIONS, ids=IDS)
def test_allowed_where_the_namespaces_policy_allows_it(name, manifest, path, setting, value):
    """The same job where its namespace's entry allows it; every other namespace keeps the defaults."""
    allowing = policy({"default": {setting: value}}, **STRICTER.get(name, {}))
    job = parse_tpujob(copy.deepcopy(manifest), tenancy=allowing.for_namespace("default"))
    assert job.metadata.name == "train"
    elsewhere = copy.deepcopy(manifest)
    elsewhere["metadata"]["namespace"] = "team-b"
    with pytest.raises(InvalidTPUJob):
        parse_tpujob(elsewhere, tenancy=allowing.for_namespace("team-b"))


def test_without_a_policy_only_the_schema_and_the_operators_own_rules_judge():
    """`tpujob render` and the finalizer parse without a namespace's policy."""
    for _, manifest, *_ in ESCALATIONS:
        if "startupTimeoutSeconds" not in str(manifest):
            parse_tpujob(copy.deepcopy(manifest))


def test_a_namespace_entry_overrides_only_the_fields_it_names():
    tenancy = policy({"team-a": {"hostNetwork": True}}, maxChips=64, capabilities=["NET_RAW"])
    team_a = tenancy.for_namespace("team-a")
    assert team_a.host_network and team_a.max_chips == 64 and team_a.capabilities == ["NET_RAW"]
    assert tenancy.for_namespace("team-b") == tenancy.defaults
    assert not tenancy.defaults.host_network


def test_the_default_refuses_every_escalation_and_limits_nothing_else():
    default = NamespacePolicy()
    assert not (default.host_network or default.privileged or default.allow_privilege_escalation)
    assert not default.run_as_root and default.capabilities == ["NET_BIND_SERVICE"]
    assert default.existing_pools and default.max_chips is None
    assert default.reservations is None and default.priority_classes is None


def test_a_startup_timeout_of_zero_takes_the_namespaces_cap():
    """Before the policy, 0 held a slice forever."""
    tenancy = policy(maxStartupTimeoutSeconds=900).for_namespace("default")
    job = parse_tpujob(base_job(runPolicy={"startupTimeoutSeconds": 0}), tenancy=tenancy)
    assert job.spec.run_policy.startup_timeout_seconds == 900


def test_without_root_every_pod_runs_as_non_root_so_a_root_image_is_refused_by_the_kubelet():
    """runAsUser: 0 alone is not root: an image whose USER is root runs as root unless runAsNonRoot is true
    (the kubelet then refuses to start it: CreateContainerConfigError)."""
    job = base_job(trainer={"image": "team/trainer:1"}, pod={"securityContext": {"fsGroup": 1000}})
    strict = parse_tpujob(job, tenancy=NamespacePolicy())
    context = strict.spec.pod.security_context
    assert context is not None and context.run_as_non_root is True and context.fs_group == 1000
    pod = render_pod(strict, Cluster(), 0, 0)
    assert pod["spec"]["securityContext"] == {"fsGroup": 1000, "runAsNonRoot": True}
    lenient = parse_tpujob(job, tenancy=NamespacePolicy(run_as_root=True))
    assert lenient.spec.pod.security_context is not None
    assert lenient.spec.pod.security_context.run_as_non_root is None, (
        "the image decides where root is allowed"
    )


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("defaults: {hostNetwork: maybe}", "defaults.hostNetwork"),
        ("namespaces: {team-a: {maxChips: -1}}", "namespaces.team-a.maxChips"),
        ("defaults: {hostNetwrok: true}", "defaults.hostNetwrok"),
        ("defaults: [", "not YAML"),
    ],
)
def test_a_bad_policy_stops_the_operator_at_start_naming_the_field(text, named):
    with pytest.raises(ValueError, match="TPUJOB_TENANCY_POLICY") as caught:
        OperatorConfig(tenancy_policy=text)
    assert named in str(caught.value)
