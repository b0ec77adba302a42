"""The chart with real helm into the test bed, the operator under the chart's ServiceAccount, and a real
Prometheus scraping that operator, a real trainer and GKE's TPU device plugin on the trainer's node (the
simulated GKE's) while every dashboard query is asked.

The Deployment's pod cannot run here (no container runtime), so the operator runs as a local process with
the Deployment's environment and the chart ServiceAccount's token: what the pod would do, with the
permissions the chart grants. The chart is installed namespace-scoped (a Role), with the CRD template
without CEL (the test bed's API server is 1.20). Any other operator the session started (the e2e tests'
cluster-wide one) is stopped for this module and started again after, so only the chart's operator
reconciles the job; its own /metrics proves it did.

The module runs once per monitoring backend. prometheus-operator: the test bed has no Prometheus Operator, so
static targets stand in for its ServiceMonitor and PodMonitors. gmp: Managed Service for Prometheus' real CRDs
on the test bed's CRD server, the chart's PodMonitoring and ClusterPodMonitoring objects installed by helm
(the CRDs' validation accepts them), turned into scrape configurations as GMP's operator does and run on the
real Prometheus (tests/chart/gmp.py, gmp_bed.py).
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from tests.chart import dashboard, gmp, tools
from tests.chart.conftest import CHART
from tests.chart.gmp_bed import GmpCollection
from tests.chart.prometheus import SCRAPE_SECONDS, Prometheus, Target
from tests.chart.test_chart import by_kind, render
from tests.manifests import LIGHT_TRAINING, base_job
from tpujob.api import constants as c
from tpujob.rbac import RULES
from tpujob.render.network import NAMESPACE_POLICY_NAME
from tpujob_sandbox import (
    Jobs,
    OperatorProcess,
    Sandbox,
    free_port,
    log_tail,
    namespace_name,
    service_account_token,
    token_kubeconfig,
    wait_for,
)
from tpujob_sandbox.gke import device_plugin
from tpujob_sandbox.timescale import poll_provisioning_seconds

RELEASE = "chart-test"
FULLNAME = f"{RELEASE}-tpujob-operator"
JOB = "scraped"


@dataclass
class Release:
    namespace: str
    metrics_port: int
    health_port: int
    kubeconfig: Path
    install_output: str
    # A ServiceAccount bound to the chart's -metrics-reader ClusterRole (metrics.auth.readers), as
    # Prometheus' is, and one that is not (a tenant's): their tokens.
    reader_token: str = ""
    tenant_token: str = ""
    backend: str = "prometheus-operator"
    # gmp: the token of the ServiceAccount standing for GMP's collector (monitoring.gmp.collector).
    collector_token: str = ""


def metrics_get(release: Release, token: str | None) -> tuple[int, str]:
    """GET the chart operator's /metrics over HTTPS (its self-signed certificate), with `token` if given."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(
        f"https://127.0.0.1:{release.metrics_port}/metrics",
        headers={"Authorization": f"Bearer {token}"} if token else {},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


@dataclass
class Run:
    """What happened while the job trained and after it ended."""

    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # query -> result, while training
    errors: dict[str, str] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    final_status: dict[str, Any] = field(default_factory=dict)
    operator_metrics: str = ""
    succeeded_in_prometheus: float | None = None


def helm_run(helm: Path, kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        [str(helm), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result.stdout


def adopt_existing_crds(sandbox: Sandbox, namespace: str) -> None:
    """Earlier tests (or `tpujob sandbox`) may have created the CRDs without Helm: the TPUJob CRD and
    kopf's peering CRDs. This release adopts them the documented way (Helm's ownership label and
    annotations), as a user switching to crds.install."""
    api = k8s.ApiextensionsV1Api(sandbox.api_client)
    for name in (c.CRD_NAME, "clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"):
        try:
            api.read_custom_resource_definition(name)
        except k8s.ApiException as error:
            if error.status == 404:
                continue
            raise
        api.patch_custom_resource_definition(
            name,
            {
                "metadata": {
                    "labels": {"app.kubernetes.io/managed-by": "Helm"},
                    "annotations": {
                        "meta.helm.sh/release-name": RELEASE,
                        "meta.helm.sh/release-namespace": namespace,
                    },
                }
            },
        )


@pytest.fixture(scope="module")
def no_other_operator() -> Iterator[None]:
    """Stop operators other tests started (started again after this module)."""
    paused = list(OperatorProcess.running)
    for process in paused:
        process.stop()
    yield
    for process in paused:
        process.start()


@pytest.fixture(scope="module", params=["prometheus-operator", "gmp"])
def backend(request: pytest.FixtureRequest, sandbox: Sandbox) -> str:
    """monitoring.backend; for gmp, Managed Service for Prometheus' CRDs installed. They carry CEL rules: the
    test bed serves them with its 1.36 CRD server only. A clone without them skips in one line; CI fails."""
    if request.param == "gmp":
        try:
            gmp.crds_path()
            if not sandbox.control_plane.serves_crds:
                raise gmp.GmpCrdsMissing("GMP's CRDs need the test bed's 1.36 CRD server (their CEL rules)")
        except gmp.GmpCrdsMissing as error:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"{error}; CI=true: a failure, not a skip", pytrace=False)
            pytest.skip(str(error))
        gmp.install_crds(sandbox.api_client)
    return str(request.param)


GMP_SETTINGS = {
    "monitoring.backend": "gmp",
    "metrics.serviceMonitor.enabled": "true",
    "metrics.podMonitor.enabled": "true",
    "metrics.tpuDevicePlugin.podMonitor.enabled": "true",
    "alerts.enabled": "true",
    "monitoring.gmp.collector.name": "collector",
    # Scrapes as often as the prometheus-operator backend's stand-in (tests/chart/prometheus.py
    # SCRAPE_SECONDS): the chart's 30 s default made the data the test waits on (three scrapes) take 90 s.
    **{
        f"{monitor}.{key}": value
        for monitor in ("metrics.serviceMonitor", "metrics.podMonitor", "metrics.tpuDevicePlugin.podMonitor")
        for key, value in (("interval", f"{SCRAPE_SECONDS}s"), ("scrapeTimeout", f"{SCRAPE_SECONDS}s"))
    },
}


@pytest.fixture(scope="module")
def release(sandbox: Sandbox, helm: Path, backend: str, no_other_operator: None) -> Iterator[Release]:
    core = k8s.CoreV1Api(sandbox.api_client)
    namespace = namespace_name("chart-install")
    core.create_namespace({"metadata": {"name": namespace, "labels": {"tpujob.dev/test": "true"}}})
    wait_for(
        lambda: (
            (core.read_namespaced_service_account("default", namespace).secrets or None)
            if core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items
            else None
        ),
        timeout=30,
        what=f"the default service account in {namespace}",
    )
    adopt_existing_crds(sandbox, namespace)
    metrics_port, health_port = free_port(), free_port()
    settings = {
        "watchNamespace": namespace,
        "crds.install": "true",
        # The CRD with its CEL where the test bed's API machinery has it (the 1.36 CRD server).
        "crds.cel": "true" if sandbox.control_plane.serves_crds else "false",
        "gke.project": sandbox.gke.project,
        "gke.location": sandbox.gke.location,
        "gke.cluster": sandbox.gke.cluster,
        "gke.zone": sandbox.default_zone,
        "gke.endpoint": sandbox.gke.endpoint,
        "metrics.port": str(metrics_port),
        "health.port": str(health_port),
        "operator.resyncSeconds": "2",
        "operator.sweepSeconds": "2",
        "operator.restartBackoffSeconds": "0.5",
        "operator.pollProvisioningSeconds": str(poll_provisioning_seconds(sandbox.gke.time_scale)),
        "dashboard.enabled": "true",
        # Authenticated /metrics, scraped below by a Prometheus holding the reader's token; the operator's
        # own NetworkPolicy (not enforced here: proven as an object).
        "metrics.auth.enabled": "true",
        "metrics.auth.readers[0].name": "prometheus",
        "metrics.auth.readers[0].namespace": namespace,
        "networkPolicy.operator.enabled": "true",
    }
    if backend == "gmp":
        # The collector's ServiceAccount in the test namespace stands for gmp-system/collector.
        settings |= GMP_SETTINGS | {"monitoring.gmp.collector.namespace": namespace}
    for account in ("prometheus", "tenant", "collector"):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    kubeconfig = sandbox.kubeconfig
    output = helm_run(
        helm,
        kubeconfig,
        "install", RELEASE, str(CHART), "--namespace", namespace, "--skip-crds", "--wait=hookOnly",
        "--timeout", "60s", "--set", ",".join(f"{k}={v}" for k, v in settings.items()),
    )  # fmt: skip
    yield Release(
        namespace,
        metrics_port,
        health_port,
        kubeconfig,
        output,
        reader_token=service_account_token(sandbox, namespace, "prometheus"),
        tenant_token=service_account_token(sandbox, namespace, "tenant"),
        backend=backend,
        collector_token=service_account_token(sandbox, namespace, "collector"),
    )
    helm_run(helm, kubeconfig, "uninstall", RELEASE, "--namespace", namespace, "--wait=hookOnly")
    sandbox.gke.remove_all_pools()
    core.delete_namespace(namespace)


def test_helm_install_creates_what_the_chart_promises(sandbox, helm, release):
    namespace = release.namespace
    core = k8s.CoreV1Api(sandbox.api_client)
    rbac = k8s.RbacAuthorizationV1Api(sandbox.api_client)
    apps = k8s.AppsV1Api(sandbox.api_client)
    status = json.loads(helm_run(helm, release.kubeconfig, "status", RELEASE, "-n", namespace, "-o", "json"))
    assert status["info"]["status"] == "deployed"
    assert f"It watches TPUJobs in namespace {namespace} only." in release.install_output  # NOTES.txt
    account = core.read_namespaced_service_account(FULLNAME, namespace)
    assert account.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"
    role = rbac.read_namespaced_role(FULLNAME, namespace)
    assert sandbox.api_client.sanitize_for_serialization(role.rules) == [
        {k: v for k, v in rule.items() if v} for rule in RULES
    ]
    binding = rbac.read_namespaced_role_binding(FULLNAME, namespace)
    assert (binding.subjects[0].name, binding.role_ref.kind) == (FULLNAME, "Role")
    assert not [r for r in rbac.list_cluster_role().items if r.metadata.name == FULLNAME]
    deployment = apps.read_namespaced_deployment(FULLNAME, namespace)
    assert (deployment.spec.replicas, deployment.spec.strategy.type) == (2, "RollingUpdate")
    # policy/v1beta1: the test bed is Kubernetes 1.20 (the chart takes policy/v1 where the API has it).
    budget = k8s.CustomObjectsApi(sandbox.api_client).get_namespaced_custom_object(
        "policy", "v1beta1", namespace, "poddisruptionbudgets", FULLNAME
    )
    assert budget["spec"]["maxUnavailable"] == 1
    assert deployment.spec.template.spec.service_account_name == FULLNAME
    service = core.read_namespaced_service(f"{FULLNAME}-metrics", namespace)
    assert service.spec.ports[0].port == 8000
    dashboard_map = core.read_namespaced_config_map(f"{FULLNAME}-dashboard", namespace)
    assert dashboard_map.metadata.labels["grafana_dashboard"] == "1"
    assert json.loads(dashboard_map.data["tpujob.json"]) == dashboard.load()
    crd = k8s.ApiextensionsV1Api(sandbox.api_client).read_custom_resource_definition(c.CRD_NAME)
    assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
    assert crd.metadata.annotations["meta.helm.sh/release-name"] == RELEASE
    assert any(cond.type == "Established" and cond.status == "True" for cond in crd.status.conditions)


@pytest.fixture(scope="module")
def chart_operator(sandbox: Sandbox, release: Release, tmp_path_factory) -> Iterator[OperatorProcess]:
    """`tpujob operator` with the installed Deployment's env, under the chart ServiceAccount's token."""
    folder = tmp_path_factory.mktemp("chart-operator")
    deployment = k8s.AppsV1Api(sandbox.api_client).read_namespaced_deployment(FULLNAME, release.namespace)
    (container,) = deployment.spec.template.spec.containers
    assert container.args == ["operator"]
    # The pod's name stands in for the Downward API's (POD_ID: the replica's identity in the peering).
    env = {e.name: e.value or "" for e in container.env if e.value_from is None} | {"POD_ID": f"{FULLNAME}-0"}
    kubeconfig = token_kubeconfig(sandbox, release.namespace, FULLNAME, folder / "kubeconfig")
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    process = OperatorProcess({**base, **env, "KUBECONFIG": str(kubeconfig)}, folder / "operator.log").start()

    def serving() -> bool:
        assert process.process is not None and process.process.poll() is None, process.log()[-3000:]
        try:
            return metrics_get(release, None)[0] == 401  # up, and asking who is there
        except OSError:
            return False

    wait_for(serving, timeout=60, what="the chart's operator to serve /metrics", last_state=process.log)
    yield process
    process.stop()


def tpu_monitor_endpoint(helm: Path) -> dict[str, Any]:
    """The chart's TPU device plugin PodMonitor's endpoint, as helm renders it."""
    documents = by_kind(render(helm, "--set", "metrics.tpuDevicePlugin.podMonitor.enabled=true"))
    (monitor,) = [d for d in documents["PodMonitor"] if d["metadata"]["name"].endswith("-tpu-device-plugin")]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    return dict(endpoint)


def operator_metrics(release: Release) -> str:
    status, body = metrics_get(release, release.reader_token)
    assert status == 200, body
    return body


def gmp_prometheus(
    sandbox: Sandbox, release: Release, server: Path, folder: Path, trainer: k8s.V1Pod, plugin_address: str
) -> Prometheus:
    """A Prometheus scraping what the chart's installed GMP objects select, as GMP's collectors would: the
    operator's pod, the trainer's and the TPU device plugin's on the trainer's node."""
    collection = GmpCollection(sandbox, release.namespace, release.collector_token, folder)
    deployment = k8s.AppsV1Api(sandbox.api_client).read_namespaced_deployment(FULLNAME, release.namespace)
    trainer_pod = sandbox.api_client.sanitize_for_serialization(trainer)
    plugin_pod = collection.device_plugin_pod(trainer.spec.node_name, plugin_address)
    collection.discover([collection.operator_pod(deployment), trainer_pod, plugin_pod])
    return Prometheus(server, folder, [], scrape_configs=collection.scrape_configs()).start()


@pytest.fixture(scope="module")
def run(sandbox, helm, release, chart_operator, tmp_path_factory, trainer_image) -> Iterator[Run]:
    """A real trainer job under the chart's operator, scraped by a real Prometheus: every dashboard query
    is asked once the data it needs exists (a checkpoint saved, a few scrapes), then the job succeeds."""
    try:
        server, _ = tools.prometheus()
    except tools.ToolMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    folder = tmp_path_factory.mktemp("prometheus")
    # The trainer's target: its pod's IP and metrics port, written once it runs (as a PodMonitor's discovery
    # finds it then; the test bed gives each pod a loopback IP of its own, where its trainer listens).
    trainer_targets = folder / "tpujob-trainers.json"
    trainer_targets.write_text("[]")
    # The device plugin's targets: written once the job's node is up (Kubernetes discovery finds the
    # DaemonSet's pod on it then); until then none.
    plugin_targets = folder / "tpu-device-plugin.json"
    plugin_targets.write_text("[]")
    # Stand-ins for the chart's ServiceMonitor (operator) and PodMonitor (trainers, with its relabelings),
    # and its TPU device plugin PodMonitor: its target labels (node), honorLabels and its metricRelabelings
    # as the chart renders them.
    reader_token = folder / "prometheus-token"
    reader_token.write_text(release.reader_token)
    targets = [
        Target("tpujob-operator", f"127.0.0.1:{release.metrics_port}", {}, bearer_token_file=reader_token),
        Target("tpujob-trainers", "", {}, file_sd=trainer_targets),
        Target(
            "tpu-device-plugin",
            "",
            {},
            file_sd=plugin_targets,
            honor_labels=True,
            metric_relabelings=tuple(tpu_monitor_endpoint(helm)["metricRelabelings"]),
        ),
    ]
    prometheus: Prometheus | None = None
    outcome = Run()
    jobs = Jobs(sandbox, release.namespace)
    try:
        manifest = base_job(JOB)
        manifest["spec"]["trainer"] = {
            "image": trainer_image,
            "args": [
                "--steps", "1000000", "--log-every-steps", "20", "--checkpoint-every-steps", "50",
                "--progress", "log", *LIGHT_TRAINING,
            ],
            "checkpointDir": str(folder / "checkpoints"),
        }  # fmt: skip
        jobs.create(manifest)
        (pod,) = jobs.wait_pods_running(JOB, 1, timeout=60)
        jobs.wait_phase(JOB, "Running", timeout=30)
        labels = {"namespace": release.namespace, "tpujob": JOB, "slice": "0", "worker": "0"}
        trainer_address = f"{pod.status.pod_ip}:{c.PORT_TRAINER_METRICS}"
        trainer_targets.write_text(json.dumps([{"targets": [trainer_address], "labels": labels}]))
        node = pod.spec.node_name
        address = wait_for(
            lambda: sandbox.gke.device_plugin.endpoints().get(node),
            timeout=30,
            what=f"GKE's TPU device plugin on {node}",
        )
        plugin_targets.write_text(json.dumps([{"targets": [address], "labels": {"node": node}}]))
        if release.backend == "gmp":
            prometheus = gmp_prometheus(
                sandbox, release, server, tmp_path_factory.mktemp("gmp"), pod, address
            )
        else:
            prometheus = Prometheus(server, folder, targets).start()

        def has_data() -> bool:
            status = jobs.status(JOB)
            if status.get("phase") != "Running":  # fail now, with the trainer's words
                trainer_log = log_tail(sandbox.kubelet.log_path(release.namespace, pod.metadata.name))
                raise AssertionError(f"the job left Running: {status.get('message')}\n{trainer_log}")
            # A checkpoint saved and loss reported, the job Running in the operator's gauge, and enough
            # trainer scrapes for rate() (two samples in the window).
            checks = [
                "tpujob_trainer_last_checkpoint_timestamp_seconds > 0",
                "tpujob_trainer_loss",
                'tpujob_jobs{phase="Running"} == 1',
                "count_over_time(tpujob_trainer_examples_total[5m]) >= 3",
                "count_over_time(tpujob_jobs[5m]) >= 3",
                # The device plugin's series of the trainer's chips, named after its job by the chart's
                # relabelings; training shows as a busy chip.
                f'max_over_time(duty_cycle{{tpujob="{JOB}"}}[5m]) > 0',
                f'memory_total{{tpujob="{JOB}"}}',
            ]
            return all(prometheus.query(check) for check in checks)

        wait_for(
            has_data,
            timeout=120,
            what="Prometheus to have scraped a training job with a checkpoint",
            last_state=lambda: (prometheus.targets_health(), jobs.status(JOB)),
        )
        for query in dashboard.queries():
            expr = dashboard.substitute(query.expr)
            try:
                outcome.results[query.where] = prometheus.query(expr)
            except AssertionError as error:
                outcome.errors[query.where] = str(error)
        outcome.targets = prometheus.targets_health()
        sandbox.kubelet.succeed(release.namespace, pod.metadata.name, timeout=30)
        jobs.wait_phase(JOB, "Succeeded", timeout=60)
        wait_for(lambda: not sandbox.gke.node_pools(), timeout=30, what="the job's node pool to be deleted")

        def pools_deleted() -> dict[str, Any] | None:
            status = jobs.status(JOB)
            return status if {p["state"] for p in status["nodePools"]} == {"Deleted"} else None

        outcome.final_status = wait_for(
            pools_deleted,
            timeout=30,
            what="the status to show the pool deleted",
            last_state=lambda: jobs.status(JOB),
        )
        outcome.operator_metrics = operator_metrics(release)
        outcome.succeeded_in_prometheus = wait_for(
            lambda: prometheus.value('tpujob_jobs{phase="Succeeded"}'),
            timeout=30,
            what="Prometheus to see the job Succeeded",
        )
        yield outcome
    finally:
        if prometheus is not None:
            prometheus.stop()


def test_the_operator_under_the_chart_service_account_reconciles_a_job_to_succeeded(run, chart_operator):
    assert OperatorProcess.running == {chart_operator}  # no other operator could have done it
    status = run.final_status
    assert status["phase"] == "Succeeded" and status["completionTime"]
    assert [p["state"] for p in status["nodePools"]] == ["Deleted"]
    # The chart operator's own counters saw the whole life of the job.
    for phase in ("Provisioning", "Running", "Succeeded"):
        assert f'tpujob_phase_transitions_total{{phase="{phase}"}} 1.0' in run.operator_metrics, phase
    created = 'tpujob_node_pool_operations_total{operation="create",result="accepted"} 1.0'
    assert created in run.operator_metrics
    assert "Forbidden" not in chart_operator.log(), chart_operator.log()[-3000:]


def test_prometheus_scrapes_the_operator_the_trainer_and_gkes_tpu_device_plugin(run, release):
    if release.backend == "gmp":  # GMP's job label: the (Cluster)PodMonitoring's name
        jobs = (f"{FULLNAME}-metrics", f"{FULLNAME}-trainers", f"{FULLNAME}-tpu-device-plugin")
    else:
        jobs = ("tpujob-operator", "tpujob-trainers", "tpu-device-plugin")
    assert run.targets == dict.fromkeys(jobs, "up")
    assert run.succeeded_in_prometheus == 1.0


def test_every_dashboard_query_parses_and_returns_data(run, release):
    assert not run.errors, run.errors
    empty = [where for where, result in run.results.items() if not result]
    assert not empty, f"no data for: {empty}"
    assert len(run.results) == len(dashboard.queries())
    # The values are the run's: one job, on one v5e host (4 chips), training with a checkpoint.
    chips = {
        (s["metric"]["tpu_type"], s["metric"]["capacity_mode"]): float(s["value"][1])
        for s in run.results["TPU chips held / A"]
    }
    assert chips[("v5e", "onDemand")] == 4.0
    assert sum(chips.values()) == 4.0
    phases = {s["metric"]["phase"]: float(s["value"][1]) for s in run.results["Jobs by phase / A"]}
    assert phases["Running"] == 1.0
    (age,) = run.results["Last checkpoint age / A"]
    assert 0 <= float(age["value"][1]) < 120
    (throughput,) = run.results["Training throughput / A"]
    assert float(throughput["value"][1]) > 0
    # The trainer's series name their job (the PodMonitor's relabelings, or GMP's targetLabels.fromPod).
    assert throughput["metric"] == {"namespace": release.namespace, "tpujob": JOB}
    # GKE's device plugin's series of the job's 4 chips (one v5e host), by job: its duty cycle (the trainer's
    # process on the test bed), TensorCore utilization and HBM (v5e: 16 GiB per chip).
    # Under GMP the chips' series keep the device plugin's namespace (GMP has no honorLabels and never lets a
    # relabeling write namespace): docs/operations/monitoring.md, "Metrics on GKE".
    chip_namespace = "kube-system" if release.backend == "gmp" else release.namespace
    for panel in ("TPU duty cycle / A", "TPU duty cycle / B", "TensorCore utilization / A"):
        (utilization,) = run.results[panel]
        assert utilization["metric"] == {"namespace": chip_namespace, "tpujob": JOB}, panel
        assert 0 <= float(utilization["value"][1]) <= 100, panel
    (total,) = run.results["HBM used / B"]
    assert float(total["value"][1]) == 4 * device_plugin.HBM_BYTES["tpu-v5-lite-podslice"]
    (used,) = run.results["HBM used / A"]
    assert 0 < float(used["value"][1]) <= float(total["value"][1])


def test_the_operators_metrics_answer_only_a_token_the_api_server_authorizes(release, chart_operator):
    """The real API server's TokenReview and SubjectAccessReview, under the chart's RBAC: anonymous 401, a
    tenant's valid token 403 (not bound to the -metrics-reader role), the reader's 200; Prometheus scrapes
    with the reader's (test_prometheus_scrapes_the_operator_the_trainer_and_gkes_tpu_device_plugin)."""
    assert metrics_get(release, None)[0] == 401
    assert metrics_get(release, "not-a-token")[0] == 401
    status, body = metrics_get(release, release.tenant_token)
    assert (status, body.strip()) == (
        403,
        f"Authorization denied for user system:serviceaccount:{release.namespace}:tenant",
    )
    status, body = metrics_get(release, release.reader_token)
    assert status == 200 and "tpujob_build_info" in body


def test_the_chart_s_tenancy_objects_work_on_a_real_api_server(sandbox, release, run):
    """The users' roles are aggregated into Kubernetes' own edit and view (the controller-manager's
    aggregation controller), the operator's NetworkPolicy exists, and the trained job's namespace's workers'
    NetworkPolicy names the chart's operator pods as a metrics peer."""
    rbac = k8s.RbacAuthorizationV1Api(sandbox.api_client)

    def aggregated(role: str, verb: str) -> bool:
        rules = rbac.read_cluster_role(role).rules or []
        return any("tpujobs" in (r.resources or []) and verb in r.verbs for r in rules)

    wait_for(lambda: aggregated("edit", "create"), timeout=30, what="tpujob-edit aggregated into edit")
    assert aggregated("view", "list") and not aggregated("view", "create")
    networking = k8s.NetworkingV1Api(sandbox.api_client)
    operator_policy = networking.read_namespaced_network_policy(FULLNAME, release.namespace)
    assert operator_policy.spec.ingress[0].ports[0].port == release.metrics_port
    job_policy = networking.read_namespaced_network_policy(NAMESPACE_POLICY_NAME, release.namespace)
    deployment = k8s.AppsV1Api(sandbox.api_client).read_namespaced_deployment(FULLNAME, release.namespace)
    pod_labels = deployment.spec.template.metadata.labels
    peers = job_policy.spec.ingress[1]._from
    assert peers[0].pod_selector.match_labels.items() <= pod_labels.items()
    assert peers[0].namespace_selector.match_labels == {"kubernetes.io/metadata.name": release.namespace}
