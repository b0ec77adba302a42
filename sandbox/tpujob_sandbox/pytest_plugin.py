"""The test bed's pytest fixtures (registered through the `pytest11` entry point): one test bed (real
control plane + simulated GKE and kubelet) per session, one namespace per test.

    def test_something(sandbox, namespace, gke, kubelet, core):
        core.list_node()                                           # admin client of the real API server
        pools = gke.client()                                       # real google-cloud-container, REST, sim
        gke.inject_call_fault("quota")                             # next CreateNodePool answers 403
        gke.set_capacity("us-central1-a", "ct5p-hightpu-4t", 0)    # a stockout in that zone
        gke.calls["CreateNodePool"]                                # calls received (this test only)
        kubelet.succeed(namespace, "pod-name")                     # the pod's containers exit 0
        kubelet.preempt_node(node_name)                            # spot reclaim / maintenance

    def test_a_job(jobs):                                          # `tpujob operator` runs on the bed
        jobs.create(manifest); jobs.wait_phase("name", "Running")

    def test_the_trainer(jobs, trainer_image):                     # its pods run the real trainer

Tiers, by marker, set here from the fixtures a test uses: `e2e` (the test bed) and `trainer` (a real trainer
process: `trainer_image`). E2e jobs run a plain image the kubelet runs no process for; a test that starts a
real trainer (TensorFlow or a local image such as JAX) without the `trainer` marker fails, naming the fix.

The first session on a fresh machine builds the control plane (about 5 minutes, progress on the terminal).
With TPUJOB_TEST_SANDBOX naming the folder of a running `tpujob sandbox up`, the session uses that control
plane instead of starting one (bed.attach_sandbox): a single test costs seconds.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from tpujob.api import constants as c
from tpujob_sandbox.bed import Sandbox, SandboxNotRunning, attach_sandbox, start_sandbox
from tpujob_sandbox.binaries import BinariesUnavailable, find_binaries
from tpujob_sandbox.controlplane import ControlPlane
from tpujob_sandbox.gke import GkeSimulator
from tpujob_sandbox.jobs import Jobs
from tpujob_sandbox.kubelet import (
    DEFAULT_TRAINER_IMAGES,
    KubeletSimulator,
    LocalContainers,
    is_trainer_image,
    local_image_for,
)
from tpujob_sandbox.kueue import crds as kueue_crds
from tpujob_sandbox.kueue.handle import KueueHandle
from tpujob_sandbox.kueue.provisioning import ProvisioningController, ProvisioningRequestCrdMissing
from tpujob_sandbox.kueue.provisioning import install_crd as install_pr_crd
from tpujob_sandbox.kueue.simulator import KueueSimulator
from tpujob_sandbox.kueue.visibility_server import VisibilityServer
from tpujob_sandbox.operators import OperatorProcess, install_crd, operator_env
from tpujob_sandbox.pki import Pki
from tpujob_sandbox.waiting import wait_for

# The simulated GKE runs this much faster than GKE: a TPU pool's 5 minutes of provisioning take 0.6 s, a
# stockout GKE retries for 35 minutes lasts 4.2 s. Slow enough that a test can see PROVISIONING.
TIME_SCALE = 0.002
SANDBOX_FIXTURES = {"sandbox", "namespace", "gke", "kubelet", "core", "kueue", "no_kueue"}
TRAINER_FIXTURES = {"trainer_image"}
# The folder of a running `tpujob sandbox up` whose control plane the session uses.
ENV_TEST_SANDBOX = "TPUJOB_TEST_SANDBOX"
# The trainer image as the simulated kubelet knows it: a pod of it runs `python -m tpujob_trainer`.
TRAINER_IMAGE = f"{DEFAULT_TRAINER_IMAGES[0]}:test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs the test bed (real control plane)")
    config.addinivalue_line(
        "markers", "trainer: runs a real trainer (TensorFlow or JAX), in the test's process or as processes"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test on the test bed is an e2e test (`-m "not e2e"` runs the rest); every test that asks for
    the real trainer is a trainer test."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if SANDBOX_FIXTURES & fixtures:
            item.add_marker(pytest.mark.e2e)
        if TRAINER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.trainer)


@pytest.fixture(scope="session")
def trainer_image() -> str:
    """The image of a job whose pods run the real trainer: the simulated kubelet starts `python -m
    tpujob_trainer` for each (TensorFlow, seconds of CPU per pod). Only for tests of the trainer's contract
    with the operator; other e2e jobs run a plain image (tests/manifests.py PLAIN_IMAGE) whose pods run no
    process and end when the test says (kubelet.succeed, fail, exit)."""
    return TRAINER_IMAGE


def real_trainers(containers: LocalContainers, since: int = 0, namespace: str | None = None) -> list[str]:
    """The images of the processes the kubelet started (from the `since`-th on, in `namespace` if given) that
    were a real trainer: the trainer image's own program (not a test's `python -c`) or a bring-your-own image
    such as the JAX example's."""
    found = []
    for started_in, image, argv in containers.started[since:]:
        if namespace is not None and started_in != namespace:
            continue
        if is_trainer_image(image, containers.trainer_images):
            if "tpujob_trainer" in argv:
                found.append(image)
        elif local_image_for(image, containers.local_images):
            found.append(image)
    return found


@pytest.fixture(autouse=True)
def _trainers_only_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """An e2e test not marked `trainer` must not start a real trainer: it would cost the e2e tier seconds of
    CPU per pod and prove nothing about the trainer."""
    if "sandbox" not in request.fixturenames or request.node.get_closest_marker("trainer"):
        yield
        return
    bed: Sandbox = request.getfixturevalue("sandbox")
    before = len(bed.kubelet.containers.started)
    # The test's own namespace when it has one: an earlier test's pod that starts late is not this test's.
    namespace = request.getfixturevalue("namespace") if "namespace" in request.fixturenames else None
    yield
    if started := real_trainers(bed.kubelet.containers, before, namespace):
        pytest.fail(
            f"this test ran the real trainer ({', '.join(sorted(set(started)))}) without the `trainer` "
            "marker: give its jobs tests/manifests.py's plain image and end their pods with kubelet.succeed/"
            "fail, or, if it proves the trainer's contract with the operator, ask for the `trainer_image` "
            "fixture (or mark it @pytest.mark.trainer)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def sandbox(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, simulated GKE and kubelet; or, with
    TPUJOB_TEST_SANDBOX, the control plane of that running sandbox and a simulated GKE and kubelet of the
    session's own."""
    running = os.environ.get(ENV_TEST_SANDBOX)
    if running:
        try:
            bed = attach_sandbox(Path(running), tmp_path_factory.mktemp("sandbox"), time_scale=TIME_SCALE)
        except SandboxNotRunning as error:
            pytest.fail(str(error), pytrace=False)
        yield bed
        bed.stop()
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")

    def progress(message: str) -> None:
        # A first run builds for minutes: show it on the terminal even while output is captured.
        with capture.global_and_fixture_disabled():
            print(f"[tpujob sandbox] {message}", flush=True)

    try:
        binaries = find_binaries(progress=progress)
    except BinariesUnavailable as error:
        pytest.fail(str(error), pytrace=False)
    bed = start_sandbox(tmp_path_factory.mktemp("sandbox"), binaries=binaries, time_scale=TIME_SCALE)
    yield bed
    bed.stop()


@pytest.fixture
def core(sandbox: Sandbox) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(sandbox.api_client)


@pytest.fixture
def custom(sandbox: Sandbox) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(sandbox.api_client)


@pytest.fixture
def gke(sandbox: Sandbox) -> Iterator[GkeSimulator]:
    """The simulated GKE, with no faults and zero call counts at the start; its pools are removed after."""
    simulator = sandbox.gke
    simulator.clear_faults()
    simulator.reset_calls()
    yield simulator
    simulator.clear_faults()
    simulator.remove_all_pools()


@pytest.fixture
def kubelet(sandbox: Sandbox) -> Iterator[KubeletSimulator]:
    """The simulated kubelet, with its registry's test controls (`registry.missing`, `registry.private`)
    and its bad hosts (`fail_tpu_allocation`) cleared before and after the test: it serves the whole
    session, so an image or host one test refuses must not keep a later test's pods Pending in ErrImagePull
    (or rejected)."""
    simulator = sandbox.kubelet
    simulator.registry.clear()
    simulator.repair()
    yield simulator
    simulator.registry.clear()
    simulator.repair()  # a bad host one test made (fail_tpu_allocation) is no later test's


def namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")
    return f"{slug[:50].rstrip('-')}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(sandbox: Sandbox, core: k8s.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace, ready for pods (its default service account and token exist); deleted after."""
    name = namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": name, "labels": {"tpujob.dev/test": "true"}}})

    def service_account_ready() -> bool:
        accounts = core.list_namespaced_service_account(name, field_selector="metadata.name=default").items
        return bool(accounts and accounts[0].secrets)

    # Pods are refused until the controller-manager made the default service account and its token.
    wait_for(service_account_ready, timeout=30, what=f"the default service account in {name}")
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="session")
def operator(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """`tpujob operator` as users run it: a separate process under the chart's least-privilege
    ServiceAccount, against the session's test bed."""
    install_crd(sandbox)
    folder = tmp_path_factory.mktemp("operator")
    process = OperatorProcess(operator_env(sandbox, folder), folder / "operator.log").start()
    yield process
    process.stop()


@pytest.fixture
def jobs(sandbox: Sandbox, namespace: str, operator: OperatorProcess, gke: GkeSimulator) -> Iterator[Jobs]:
    """Torn down before `gke`: every TPUJob of the test is deleted through the operator (finalizer
    and all), so no job outlives its test and recreates pools in the next one."""
    handle = Jobs(sandbox, namespace)
    yield handle
    for job in handle.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)["items"]:
        handle.delete(job["metadata"]["name"])
    wait_for(
        lambda: (
            not handle.custom.list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)["items"]
        ),
        timeout=90,
        what=f"the TPUJobs of {namespace} to be deleted",
    )


@pytest.fixture(scope="session")
def _kueue_simulator(sandbox: Sandbox) -> Iterator[KueueSimulator]:
    """Kueue's controllers, simulated, for the whole session: they wait quietly while the CRDs are absent."""
    simulator = KueueSimulator(sandbox.api_client).start()
    provisioning = ProvisioningController(sandbox.api_client).start()  # the ProvisioningRequest check's
    yield simulator
    provisioning.stop()
    simulator.stop()


@pytest.fixture
def kueue_release(request: pytest.FixtureRequest) -> str:
    """The Kueue release whose CRDs a test runs on: the newest (crds.NEWEST), unless the test parametrizes
    this fixture (indirect) with another of crds.RELEASES, e.g. v0.17.1 (xpk's) or v0.14.8 (v1beta1 only)."""
    release: str = getattr(request, "param", kueue_crds.NEWEST)
    if release not in kueue_crds.RELEASES:
        raise ValueError(f"kueue_release {release!r}: the test bed has {', '.join(kueue_crds.RELEASES)}")
    return release


@pytest.fixture
def kueue_crd_folder(kueue_release: str) -> Path:
    """The folder of that release's CRDs (TPUJOB_KUEUE_CRDS, else ../shared/kueue/crds beside the repository,
    for the newest; <release>/crds beside it for the others). A clone without them skips the test in one line
    naming TPUJOB_KUEUE_CRDS and where Kueue publishes them; CI (CI=true, which .ci/run sets) has them, so
    there their absence fails the test."""
    try:
        return kueue_crds.crds_path(kueue_release)
    except kueue_crds.KueueCrdsMissing as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{error}; CI=true: a failure, not a skip", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture
def kueue(
    kueue_release: str, kueue_crd_folder: Path, sandbox: Sandbox, _kueue_simulator: KueueSimulator
) -> Iterator[KueueHandle]:
    """Kueue's CRDs of `kueue_release` installed (kueue_crd_folder; another release's replaced) and its
    admission simulated in the version they serve (tpujob_sandbox.kueue): the handle creates flavors, queues
    and priority classes with unique names, deletes them after the test, and sets waitForPodsReady for the
    test."""
    kueue_crds.install(sandbox.api_client, kueue_release)
    handle = KueueHandle(sandbox.api_client, _kueue_simulator, kueue_release)
    _kueue_simulator.poke()
    yield handle
    handle.cleanup()


@pytest.fixture(scope="session")
def _kueue_visibility_server(
    sandbox: Sandbox, _kueue_simulator: KueueSimulator
) -> Iterator[VisibilityServer]:
    """Kueue's visibility API server (tpujob_sandbox.kueue.visibility_server), for the session."""
    control_plane = sandbox.control_plane
    if not isinstance(control_plane, ControlPlane) or not control_plane.serves_crds:
        pytest.skip("Kueue's visibility API needs the test bed's own aggregator (its front-proxy cert)")
    server = VisibilityServer(
        sandbox.api_client, _kueue_simulator, Pki(control_plane.state_dir / "pki")
    ).start()
    yield server
    server.unregister()
    server.stop()


@pytest.fixture
def kueue_visibility(
    kueue: KueueHandle, _kueue_visibility_server: VisibilityServer
) -> Iterator[VisibilityServer]:
    """Kueue (the `kueue` fixture) with its visibility API served through kube-apiserver's aggregator, in the
    versions its release serves; unregistered after the test (without this fixture it is not served)."""
    _kueue_visibility_server.register(kueue.release)
    yield _kueue_visibility_server
    _kueue_visibility_server.unregister()


@pytest.fixture
def provisioning_requests(kueue: KueueHandle, sandbox: Sandbox) -> KueueHandle:
    """Kueue (the `kueue` fixture) with ProvisioningRequest's CRD (cluster-autoscaler 1.36.1) installed:
    Kueue's ProvisioningRequest admission check runs (tpujob_sandbox.kueue.provisioning) and the simulated
    GKE serves class queued-provisioning.gke.io (tpujob_sandbox.gke.queued_provisioning). Skipped (failed
    under CI=true) without the CRD, naming where to get it."""
    try:
        install_pr_crd(sandbox.api_client)
    except ProvisioningRequestCrdMissing as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{error}; CI=true: a failure, not a skip", pytrace=False)
        pytest.skip(str(error))
    return kueue


@pytest.fixture
def no_kueue(sandbox: Sandbox) -> None:
    """A cluster without Kueue: its CRDs deleted and kueue.x-k8s.io no longer served (a later `kueue`
    installs them again; the simulator picks up)."""
    kueue_crds.uninstall(sandbox.api_client)
