"""The whole test bed in one object: control plane + simulated GKE + simulated kubelet."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tpujob_sandbox.binaries import Binaries, Progress, find_binaries, stderr_progress
from tpujob_sandbox.controlplane import ControlPlane, RunningControlPlane
from tpujob_sandbox.gke import SIMULATED_NODE_LABEL, GkeSimulator, ReleaseChannel, SimCluster
from tpujob_sandbox.kubelet import (
    DEFAULT_LOCAL_IMAGES,
    ENV_LOCAL_IMAGES,
    KubeletSimulator,
    parse_local_images,
)
from tpujob_sandbox.layout import INFO_FILE
from tpujob_sandbox.processes import pid_alive

FLEX_START_LOCATION = "us-east5"
# The operator's ServiceAccount on the test bed (operators.py runs it so). The API server audits its every
# request (Metadata level: who, verb, resource, namespace; no bodies), so a test counts what one job costs
# (tests/e2e/test_request_budget.py); nobody else's.
OPERATOR_NAMESPACE = "tpujob-system"
OPERATOR_ACCOUNT = "tpujob-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"


@dataclass
class Sandbox:
    state_dir: Path
    control_plane: ControlPlane | RunningControlPlane
    api_client: k8s.ApiClient
    gke: GkeSimulator
    kubelet: KubeletSimulator

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def info(self) -> dict[str, Any]:
        """What `sandbox.json` holds: how to reach the cluster and the simulated GKE, and who to stop."""
        return {
            "kubeconfig": str(self.kubeconfig),
            "gkeEndpoint": self.gke.endpoint,
            "project": self.gke.project,
            "location": self.gke.location,
            "cluster": self.gke.cluster,
            "zone": self.default_zone,
            "releaseChannel": self.gke.cluster_model.release_channel.value,
            "timeScale": self.gke.time_scale,
            "pid": os.getpid(),
            "pids": self.control_plane.pids,
            "logs": str(self.control_plane.logs),
            "crdServer": self.control_plane.serves_crds,
            "servers": self.control_plane.servers,
        }

    @property
    def default_zone(self) -> str:
        """The zone the operator is configured with: the cluster's first zone (offers v5e and v5p)."""
        return self.gke.cluster_model.default_node_zones[0]

    def write_info(self, kueue: bool = False) -> Path:
        """`sandbox.json`; `kueue`: the sandbox also runs Kueue (its CRDs, its admission simulated)."""
        path = self.state_dir / INFO_FILE
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({**self.info(), "kueue": kueue}, indent=2) + "\n")
        partial.rename(path)  # atomic: readers never see half a file
        return path

    def preempt_slice(self, pool: str, *, recreate_after: float | None = None) -> list[str]:
        """Spot reclaim of a whole TPU slice: every node of `pool` shuts down (its pods fail as on a real
        node shutdown) and goes away; GKE brings the VMs back after `recreate_after` seconds of GKE time
        (None: never). Returns the node names."""
        nodes = self.gke.node_names(pool)
        self.kubelet.preempt_nodes(nodes)
        if recreate_after is not None:
            self.gke.recreate_nodes(pool, recreate_after)
        return nodes

    def stop(self) -> None:
        """Simulators first (they talk to the API server), then the control plane. On a running sandbox's
        control plane, which goes on, the simulated GKE's Nodes go first."""
        if isinstance(self.control_plane, RunningControlPlane):
            self.gke.remove_all_pools(drain=False)
        self.kubelet.stop()
        self.gke.stop()
        self.api_client.close()
        self.control_plane.stop()


def start_sandbox(
    state_dir: Path,
    *,
    binaries: Binaries | None = None,
    progress: Progress = stderr_progress,
    time_scale: float = 1.0,
    release_channel: ReleaseChannel = ReleaseChannel.REGULAR,
    gke_port: int = 0,
    control_plane: ControlPlane | RunningControlPlane | None = None,
    node_owner: str = "true",
) -> Sandbox:
    """Start everything (or add the simulators to a started `control_plane`); binaries are found, or built
    once, if not given. `time_scale` multiplies GKE's durations (1.0: as slow as GKE). The simulated
    kubelet serves the Nodes the simulated GKE labels with `node_owner`. Stop with `Sandbox.stop()`."""
    state_dir.mkdir(parents=True, exist_ok=True)
    if control_plane is None:
        control_plane = ControlPlane(
            binaries or find_binaries(progress=progress), state_dir, audit_users=(OPERATOR_USER,)
        ).start()
    api_client = k8s_config.new_client_from_config(config_file=str(control_plane.kubeconfig))
    gke = kubelet = None
    try:
        cluster = SimCluster(release_channel=release_channel)
        gke = GkeSimulator(api_client, cluster=cluster, time_scale=time_scale, node_owner=node_owner)
        # A second cluster of the project in us-east5, where GKE offers flex-start for v5p and v6e TPUs.
        gke.add_cluster(SimCluster(location=FLEX_START_LOCATION, release_channel=release_channel))
        gke.start(gke_port)
        # The JAX example's image runs locally too, and any image TPUJOB_SANDBOX_LOCAL_IMAGES names.
        local_images = DEFAULT_LOCAL_IMAGES + parse_local_images(os.environ.get(ENV_LOCAL_IMAGES, ""))
        kubelet = KubeletSimulator(
            api_client, state_dir, local_images=local_images, node_owner=node_owner
        ).start()
        gke.autoscaler.shut_down_nodes = gke.maintenance.shut_down_nodes = kubelet.preempt_nodes
        # GKE's TPU device plugin asks each TPU pod's runtime for its chips' activity: its local process.
        gke.device_plugin.runtime = kubelet.tpu_runtime
    except BaseException:
        for part in (kubelet, gke):
            if part:
                part.stop()
        control_plane.stop()
        raise
    return Sandbox(state_dir, control_plane, api_client, gke, kubelet)


class SandboxNotRunning(RuntimeError):
    """No `tpujob sandbox up` runs in the folder named."""


# A test session on a running sandbox labels its simulated Nodes with this prefix and its process id.
ATTACHED_OWNER_PREFIX = "session-"


def attach_sandbox(running_dir: Path, state_dir: Path, *, time_scale: float = 1.0) -> Sandbox:
    """A test bed on the control plane of the sandbox `tpujob sandbox up` runs in `running_dir`: no control
    plane to start, so a test costs seconds. The session brings its own simulated GKE and kubelet (their test
    controls and call records are in-process objects); the sandbox's own ones leave this session's Nodes
    alone (their label names another owner), and so do this session's theirs. Stopping it stops only the
    simulators."""
    info_path = running_dir / INFO_FILE
    try:
        info = json.loads(info_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        info = None
    if info is None or not pid_alive(int(info["pid"])):
        raise SandboxNotRunning(
            f"no sandbox runs in {running_dir}: start one with `tpujob sandbox up --dir {running_dir}`"
        )
    control_plane = RunningControlPlane(
        Path(info["kubeconfig"]),
        Path(info["logs"]),
        serves_crds=bool(info.get("crdServer")),
        servers=info.get("servers", {}),
    )
    owner = f"{ATTACHED_OWNER_PREFIX}{os.getpid()}"
    bed = start_sandbox(state_dir, control_plane=control_plane, time_scale=time_scale, node_owner=owner)
    _remove_nodes_of_dead_sessions(bed)
    return bed


def _remove_nodes_of_dead_sessions(bed: Sandbox) -> None:
    """Nodes an earlier session left (it was killed before its pools were removed): nobody serves them, and
    the scheduler would bind this session's pods to them."""
    core = k8s.CoreV1Api(bed.api_client)
    for node in core.list_node(label_selector=SIMULATED_NODE_LABEL).items:
        owner: str = node.metadata.labels[SIMULATED_NODE_LABEL]
        session = owner.removeprefix(ATTACHED_OWNER_PREFIX)
        if session != owner and not pid_alive(int(session)):
            core.delete_node(node.metadata.name)
