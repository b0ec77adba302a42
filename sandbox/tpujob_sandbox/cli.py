"""`tpujob sandbox up|operator|status|down|serve`: the test bed as a service to try the operator on."""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tpujob_sandbox.binaries import BinariesUnavailable, find_binaries
from tpujob_sandbox.layout import DAEMON_LOG, INFO_FILE
from tpujob_sandbox.processes import log_tail, pid_alive
from tpujob_sandbox.timescale import poll_provisioning_seconds
from tpujob_sandbox.waiting import Timeout, wait_for

# gke.cluster.ReleaseChannel's values, spelled here so `up`, `status` and `down` import no client library.
RELEASE_CHANNELS = ("none", "rapid", "regular", "stable")

DEFAULT_DIR = Path(".state/sandbox")
UP_TIMEOUT_SECONDS = 120.0
DOWN_TIMEOUT_SECONDS = 30.0
KILL_TIMEOUT_SECONDS = 10.0
EXIT_NOT_RUNNING = 3


def add_subcommand(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `sandbox` with `up`, `status`, `down` and `serve` to the `tpujob` command line."""
    sandbox = subparsers.add_parser(
        "sandbox",
        help="a local Kubernetes control plane with simulated GKE and TPU nodes",
        description="A real kube-apiserver, scheduler and controller-manager on loopback, plus a simulated "
        "GKE API and kubelet: try the operator without a GKE account.",
    )
    actions = sandbox.add_subparsers(
        dest="sandbox_command", required=True, metavar="{up,operator,status,down,serve}"
    )
    for name, func, help_text in (
        ("up", cmd_up, "start the sandbox in the background; writes DIR/kubeconfig and DIR/sandbox.json"),
        ("operator", cmd_operator, "run `tpujob operator` in the foreground against the running sandbox"),
        ("status", cmd_status, "show whether the sandbox runs and is healthy"),
        ("down", cmd_down, "stop the sandbox and every process it started"),
        ("serve", cmd_serve, "run the sandbox in the foreground until interrupted"),
    ):
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.add_argument(
            "--dir", type=Path, default=DEFAULT_DIR, help=f"state folder (default: {DEFAULT_DIR})"
        )
        action.set_defaults(func=func)
    for action_name in ("up", "serve"):
        actions.choices[action_name].add_argument(
            "--time-scale",
            type=float,
            default=0.02,
            help="the simulated GKE's time factor: 1 is as slow as GKE (minutes to provision a TPU pool); "
            "default 0.02 (a 5-minute provisioning takes 6 s)",
        )
        actions.choices[action_name].add_argument(
            "--kueue",
            action="store_true",
            help="install Kueue v0.19.2's CRDs (TPUJOB_KUEUE_CRDS) and simulate its admission, so jobs "
            "labelled kueue.x-k8s.io/queue-name go through its queues (`tpujob sandbox operator` then runs "
            "with TPUJOB_KUEUE=true)",
        )
        actions.choices[action_name].add_argument(
            "--release-channel",
            choices=RELEASE_CHANNELS,
            default="regular",
            help="the simulated cluster's release channel (default: regular, as for a new GKE cluster)",
        )


def read_info(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((state_dir / INFO_FILE).read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def sandbox_pids(info: dict[str, Any]) -> dict[str, int]:
    return {"sandbox": int(info["pid"]), **{name: int(pid) for name, pid in info.get("pids", {}).items()}}


def api_ready(kubeconfig_path: Path) -> bool:
    """GET /readyz with the kubeconfig's own credentials and CA."""
    config = yaml.safe_load(kubeconfig_path.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    with tempfile.NamedTemporaryFile("w", suffix=".crt") as ca:
        ca.write(base64.b64decode(cluster["certificate-authority-data"]).decode())
        ca.flush()
        context = ssl.create_default_context(cafile=ca.name)
    request = urllib.request.Request(
        f"{cluster['server']}/readyz", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=3) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def print_info(info: dict[str, Any]) -> None:
    print(f"kubeconfig:   {info['kubeconfig']}")
    print(
        f"GKE endpoint: {info['gkeEndpoint']}  (projects/{info['project']}/locations/{info['location']}/"
        f"clusters/{info['cluster']})"
    )
    for server, groups in info.get("servers", {}).items():
        print(f"serves:       {groups}: {server}")
    if info.get("kueue"):
        print(
            "kueue:        Kueue v0.19.2's CRDs, its admission simulated (tpujob sandbox operator enables it)"
        )
    print(f"logs:         {info['logs']}")
    print(f"try:          kubectl --kubeconfig {info['kubeconfig']} get nodes")


def operator_environment(info: dict[str, Any]) -> dict[str, str]:
    """The settings that point `tpujob operator` at the sandbox (its kubeconfig and simulated GKE), polling
    GKE at the sandbox's time scale."""
    return {
        "KUBECONFIG": info["kubeconfig"],
        "TPUJOB_GKE_ENDPOINT": info["gkeEndpoint"],
        "TPUJOB_GKE_PROJECT": info["project"],
        "TPUJOB_GKE_LOCATION": info["location"],
        "TPUJOB_GKE_CLUSTER": info["cluster"],
        "TPUJOB_GKE_ZONE": info["zone"],
        "TPUJOB_POLL_PROVISIONING_SECONDS": str(poll_provisioning_seconds(float(info["timeScale"]))),
        **({"TPUJOB_KUEUE": "true"} if info.get("kueue") else {}),
    }


def cmd_operator(args: argparse.Namespace) -> int:
    info = read_info(args.dir)
    if info is None or not pid_alive(int(info["pid"])):
        print(f"sandbox not running in {args.dir}: start it with `tpujob sandbox up --dir {args.dir}`")
        return EXIT_NOT_RUNNING
    # The operator exactly as users run it, in this process's place (Ctrl+C stops it).
    from tpujob_sandbox.operators import operator_python  # the test bed's client: not for `up` and `down`

    python = operator_python()
    os.execvpe(
        python,
        [python, "-m", "tpujob.cli", "operator"],
        {**os.environ, **operator_environment(info)},
    )


def cmd_up(args: argparse.Namespace) -> int:
    state_dir: Path = args.dir.resolve()
    running = read_info(state_dir)
    if running and pid_alive(int(running["pid"])):
        print(f"sandbox already running in {state_dir}")
        print_info(running)
        return 0
    try:
        # In the foreground, so a first run shows the build's progress.
        find_binaries()
    except BinariesUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / INFO_FILE).unlink(missing_ok=True)
    log_path = state_dir / DAEMON_LOG
    with log_path.open("ab") as log:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "tpujob_sandbox.cli", "serve", "--dir", str(state_dir),
             "--time-scale", str(args.time_scale), "--release-channel", args.release_channel,
             *(["--kueue"] if args.kueue else [])],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this command and the terminal's Ctrl+C
        )  # fmt: skip
    try:
        info = wait_for(
            lambda: _started_or_died(state_dir, daemon),
            timeout=UP_TIMEOUT_SECONDS,
            what="the sandbox to start",
        )
    except (Timeout, RuntimeError) as error:
        print(f"error: {error}\n{log_tail(log_path)}", file=sys.stderr)
        if daemon.poll() is None:
            daemon.terminate()
        return 1
    print(f"sandbox up in {state_dir}")
    print_info(info)
    return 0


def _started_or_died(state_dir: Path, daemon: subprocess.Popen[bytes]) -> dict[str, Any] | None:
    if daemon.poll() is not None:
        raise RuntimeError(f"the sandbox exited with {daemon.returncode}; log {state_dir / DAEMON_LOG}:")
    return read_info(state_dir)


def cmd_status(args: argparse.Namespace) -> int:
    info = read_info(args.dir)
    if info is None or not pid_alive(int(info["pid"])):
        print(f"sandbox not running in {args.dir}")
        return EXIT_NOT_RUNNING
    alive = {name: pid_alive(pid) for name, pid in sandbox_pids(info).items()}
    ready = api_ready(Path(info["kubeconfig"]))
    for name, pid in sandbox_pids(info).items():
        print(f"{name:<24} pid {pid:<8} {'running' if alive[name] else 'STOPPED'}")
    print(f"{'API server /readyz':<24} {'ok' if ready else 'NOT READY'}")
    print_info(info)
    return 0 if ready and all(alive.values()) else 1


def cmd_down(args: argparse.Namespace) -> int:
    info = read_info(args.dir)
    if info is None:
        print(f"sandbox not running in {args.dir}")
        return 0
    pids = sandbox_pids(info)
    _signal(pids["sandbox"], signal.SIGTERM)
    try:
        wait_for(
            lambda: not any(pid_alive(pid) for pid in pids.values()),
            timeout=DOWN_TIMEOUT_SECONDS,
            what="the sandbox's processes to exit",
        )
    except Timeout:
        left = {name: pid for name, pid in pids.items() if pid_alive(pid)}
        print(f"still running after {DOWN_TIMEOUT_SECONDS:.0f} s, killing: {left}", file=sys.stderr)
        for pid in left.values():
            _signal(pid, signal.SIGKILL)
        # A killed process is gone only once the kernel has torn it down: `down` returns after that.
        wait_for(
            lambda: not any(pid_alive(pid) for pid in left.values()),
            timeout=KILL_TIMEOUT_SECONDS,
            what=f"the killed processes {left} to exit",
        )
    (args.dir / INFO_FILE).unlink(missing_ok=True)
    print(f"sandbox in {args.dir} stopped")
    return 0


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def cmd_serve(args: argparse.Namespace) -> int:
    from tpujob_sandbox.controlplane import ControlPlane

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    # The client libraries take seconds to import on a busy machine: do it while the API server boots.
    warm_up = threading.Thread(target=importlib.import_module, args=("tpujob_sandbox.bed",), daemon=True)
    warm_up.start()
    state_dir = args.dir.resolve()
    control_plane = ControlPlane(find_binaries(), state_dir).start()
    warm_up.join()
    from tpujob_sandbox.bed import start_sandbox
    from tpujob_sandbox.gke import ReleaseChannel

    bed = start_sandbox(
        state_dir,
        time_scale=args.time_scale,
        release_channel=ReleaseChannel(args.release_channel),
        control_plane=control_plane,
    )
    kueue = _start_kueue(bed) if args.kueue else None
    try:
        bed.write_info(kueue=kueue is not None)
        print(f"sandbox serving in {args.dir}", flush=True)
        print_info(bed.info())
        sys.stdout.flush()
        stop.wait()
    finally:
        (args.dir / INFO_FILE).unlink(missing_ok=True)
        if kueue is not None:
            kueue.stop()
        bed.stop()
    return 0


def _start_kueue(bed: Any) -> Any:
    """Kueue's CRDs on the bed and its admission simulated, for as long as the sandbox serves."""
    from tpujob_sandbox.kueue import crds
    from tpujob_sandbox.kueue.simulator import KueueSimulator

    crds.install(bed.api_client)
    return KueueSimulator(bed.api_client).start()


def main(argv: list[str] | None = None) -> int:
    """`python -m tpujob_sandbox.cli ...`: the same commands without the rest of `tpujob`."""
    parser = argparse.ArgumentParser(prog="tpujob-sandbox")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_subcommand(subparsers)
    args = parser.parse_args(["sandbox", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
