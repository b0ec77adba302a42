"""`tpujob run FILE --local`: a TPUJob's trainer on this machine, one process per TPU host.

Each process gets the env the operator renders for its pod (`tpujob.render.worker_env`), with
the workers' addresses on localhost instead of the pods' DNS names, so a manifest that trains
here trains the same way on GKE. Worker 0 draws the progress; every worker serves its metrics;
the chief's JSON summary is printed at the end and the exit code says whether training succeeded.

Any image's command runs as given (`python` being this environment's); `--mount /app=examples/jax`
stands for the image's files: a command word or env value under /app is taken from examples/jax.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tpujob.api import TPUJob
from tpujob.api import constants as c
from tpujob.api.trainer_contract import (
    ENV_CHECKPOINT_DIR,
    ENV_EXPORT_DIR,
    ENV_METRICS_ADDRESS,
    ENV_METRICS_PORT,
    ENV_PROGRESS,
    ENV_SUMMARY_FILE,
)
from tpujob.local_workers import LocalRun, Worker, say
from tpujob.manifests import load_one_job
from tpujob.render import Cluster, pod, worker_env
from tpujob.render.cluster import slice_shape

DEFAULT_WORK_DIR = Path(".state/local")
# Workers serve their metrics on loopback only: a local run is nobody else's to scrape, and a wildcard
# bind would also take the port from every other address of this machine.
LOCAL_METRICS_ADDRESS = "127.0.0.1"


def add_subcommand(subparsers: Any) -> None:
    run = subparsers.add_parser(
        "run",
        help="run a TPUJob's trainer here (--local), one process per TPU host",
        description="Train a TPUJob locally with the env the operator would give each TPU host.",
    )
    run.add_argument("file", type=Path, metavar="FILE", help="a TPUJob manifest")
    run.add_argument(
        "--local", action="store_true", help="run on this machine (the only mode of this command)"
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=c.PORT_TRAINER_METRICS,
        help="worker i serves Prometheus metrics on 127.0.0.1, this port + i (default %(default)s; 0: any "
        "free ports)",
    )
    run.add_argument(
        "--work-dir",
        type=Path,
        default=DEFAULT_WORK_DIR,
        help="logs, summaries and local checkpoints go to WORK_DIR/<job> (default %(default)s)",
    )
    run.add_argument(
        "--checkpoint-dir",
        help="override spec.trainer.checkpointDir (default: the manifest's; a gs:// one becomes local)",
    )
    run.add_argument(
        "--export-dir",
        help="override spec.trainer.exportDir (default: the manifest's, a gs:// one becoming WORK_DIR/<job>/"
        "export; unset, <checkpoint dir>/export as on GKE)",
    )
    run.add_argument(
        "--fresh", action="store_true", help="delete earlier local checkpoints: start from step 0"
    )
    run.add_argument(
        "--mount",
        action="append",
        default=[],
        type=parse_mount,
        metavar="IMAGE_DIR=LOCAL_DIR",
        help="the image's IMAGE_DIR is LOCAL_DIR here: command words and env values under it are mapped "
        "(e.g. --mount /app=examples/jax); repeatable",
    )
    run.set_defaults(func=run_local)


def local_hostnames(ports: list[int]) -> list[str]:
    """What TPU_WORKER_HOSTNAMES lists locally: one localhost address per host, each its own port."""
    return [f"localhost:{port}" for port in ports]


Mounts = tuple[tuple[str, str], ...]


def parse_mount(text: str) -> tuple[str, str]:
    """`IMAGE_DIR=LOCAL_DIR` (LOCAL_DIR made absolute) for --mount."""
    image_dir, sep, local_dir = text.partition("=")
    if not sep or not image_dir.startswith("/") or not local_dir:
        raise argparse.ArgumentTypeError(f"{text!r}: expected IMAGE_DIR=LOCAL_DIR, e.g. /app=examples/jax")
    return image_dir.rstrip("/") or "/", str(Path(local_dir).resolve())


def map_mounted(word: str, mounts: Mounts) -> str:
    """A path at or under a mounted image directory, as the local path; anything else unchanged."""
    for image_dir, local_dir in mounts:
        if word == image_dir or word.startswith(image_dir.rstrip("/") + "/"):
            return local_dir + word[len(image_dir.rstrip("/")) :]
    return word


def trainer_command(job: TPUJob, python: str, mounts: Mounts = ()) -> list[str]:
    """The container's command and args, run with this Python (the image's entrypoint by default)."""
    trainer = job.spec.trainer
    command = list(trainer.command) or [python, "-m", "tpujob_trainer"]
    if Path(command[0]).name in ("python", "python3"):
        command[0] = python  # the image's python is this environment's here
    return [map_mounted(word, mounts) for word in command + list(trainer.args)]


def local_checkpoint_dir(configured: str | None, override: str | None, job_dir: Path) -> str | None:
    """A remote checkpointDir (gs://) needs cloud credentials: locally it becomes a local directory."""
    if override:
        return override
    if configured and "://" in configured:
        return str(job_dir / "checkpoints")
    return configured


def local_export_dir(
    configured: str | None, override: str | None, checkpoint_dir: str | None, job_dir: Path
) -> str | None:
    """Where worker 0 exports the model here. A remote exportDir (gs://) becomes a local directory; unset, it
    follows the (local) checkpoint dir as the operator's default does: <checkpoint dir>/export."""
    if override:
        return override
    if configured:
        return str(job_dir / "export") if "://" in configured else configured
    if checkpoint_dir:
        return checkpoint_dir.rstrip("/") + "/export"
    return None


class CannotRunLocally(ValueError):
    """Env the job takes from the cluster (a Secret, a ConfigMap, a resource) that is not in this shell."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# What the downward API gives a process here: this machine is the node, every address is the loopback.
LOCAL_POD_FIELDS = {
    "spec.nodeName": "localhost",
    "status.hostIP": "127.0.0.1",
    "status.hostIPs": "127.0.0.1",
    "status.podIP": "127.0.0.1",
    "status.podIPs": "127.0.0.1",
}


def field_value(rendered_pod: dict[str, Any], field_path: str) -> str:
    """A fieldRef as the kubelet resolves it, from the pod the operator would create for this worker."""
    metadata = rendered_pod["metadata"]
    for key in ("labels", "annotations"):
        prefix = f"metadata.{key}['"
        if field_path.startswith(prefix):
            return str((metadata.get(key) or {}).get(field_path[len(prefix) : -2], ""))
    if field_path == "spec.serviceAccountName":
        return str(rendered_pod["spec"].get("serviceAccountName", "default"))
    if field_path in ("metadata.name", "metadata.namespace"):
        return str(metadata[field_path.split(".")[1]])
    return LOCAL_POD_FIELDS.get(field_path, "")


def local_env(
    rendered: list[dict[str, Any]], rendered_pod: dict[str, Any], environ: dict[str, str], mounts: Mounts = ()
) -> dict[str, str]:
    """The rendered env as values: fieldRefs from the worker's pod; a Secret's, ConfigMap's or resource's
    value from this shell's variable of the same name (it stands for the cluster's), or CannotRunLocally."""
    env: dict[str, str] = {}
    problems = []
    for item in rendered:
        name, source = item["name"], item.get("valueFrom")
        if source is None:
            env[name] = map_mounted(item.get("value", ""), mounts)
        elif "fieldRef" in source:
            env[name] = field_value(rendered_pod, source["fieldRef"]["fieldPath"])
        elif name in environ:
            env[name] = environ[name]
        elif not any((source.get(ref) or {}).get("optional") for ref in ("secretKeyRef", "configMapKeyRef")):
            problems.append(
                f"{name} comes from {_source_of(source)} in the cluster; export {name} to run here"
            )
    if problems:
        raise CannotRunLocally(problems)
    return env


def _source_of(source: dict[str, Any]) -> str:
    for ref, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
        if ref in source:
            return f"{kind} {source[ref]['name']} key {source[ref]['key']}"
    return f"the container's {source['resourceFieldRef']['resource']}"


def cluster_only_notes(job: TPUJob, mounts: Mounts = ()) -> list[str]:
    """What of the job's pod does not happen here, each with what to do instead."""
    trainer, pod_spec = job.spec.trainer, job.spec.pod
    notes = [
        f"envFrom {ref.name} is not read here; its variables come from this shell's environment"
        for ref in (source.secret_ref or source.config_map_ref for source in trainer.env_from)
        if ref is not None
    ]
    mapped = {image_dir for image_dir, _ in mounts}
    notes += [
        f"volume {mount.name} is not mounted at {mount.mount_path}: use --mount {mount.mount_path}=DIR"
        for mount in trainer.volume_mounts
        if mount.mount_path.rstrip("/") not in mapped
    ]
    others = [x.name for x in (*pod_spec.init_containers, *pod_spec.containers)]
    if others:
        notes.append(f"only the trainer runs here, not {', '.join(others)}")
    return notes


def plan_workers(
    job: TPUJob,
    *,
    python: str,
    base_env: dict[str, str],
    worker_ports: list[int],
    metrics_ports: list[int],
    job_dir: Path,
    checkpoint_dir: str | None,
    progress_bar: bool,
    mounts: Mounts = (),
    export_dir: str | None = None,
) -> list[Worker]:
    """Pure: every local process, its command and its env (the operator's env plus local wiring); raises
    CannotRunLocally for env only the cluster has."""
    hosts = slice_shape(job).hosts
    hostnames = local_hostnames(worker_ports)
    workers = []
    for slice_index in range(job.spec.tpu.slices):
        slice_hosts = hostnames[slice_index * hosts : (slice_index + 1) * hosts]
        for host in range(hosts):
            index = slice_index * hosts + host
            rendered = worker_env(
                job, slice_index, host, worker_hostnames=slice_hosts, coordinator_address=hostnames[0]
            )
            rendered_pod = pod(job, Cluster(), slice_index, host)
            env = {**base_env, **local_env(rendered, rendered_pod, base_env, mounts)}
            env[ENV_METRICS_PORT] = str(metrics_ports[index])  # one host: one port each
            env[ENV_METRICS_ADDRESS] = LOCAL_METRICS_ADDRESS
            if checkpoint_dir:
                env[ENV_CHECKPOINT_DIR] = checkpoint_dir
            if export_dir:
                env[ENV_EXPORT_DIR] = export_dir
            env[ENV_SUMMARY_FILE] = str(job_dir / f"worker-{index}-summary.json")
            if index == 0 and progress_bar:
                env.setdefault(ENV_PROGRESS, "bar")
            env["PYTHONUNBUFFERED"] = "1"
            workers.append(
                Worker(
                    index=index,
                    command=trainer_command(job, python, mounts),
                    env=env,
                    metrics_port=metrics_ports[index],
                    summary_file=job_dir / f"worker-{index}-summary.json",
                    log_file=job_dir / f"worker-{index}.log",
                )
            )
    return workers


def overall_exit_code(exit_codes: list[int]) -> int:
    """0 when every worker succeeded; else worker 0's code when it failed, else the first failure."""
    failures = [code for code in exit_codes if code != 0]
    if not failures:
        return 0
    return exit_codes[0] if exit_codes[0] != 0 else failures[0]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOCAL_METRICS_ADDRESS, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def busy_ports(ports: list[int]) -> list[int]:
    """The ports of `ports` another process already listens on (here, on loopback)."""
    busy = []
    for port in ports:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the workers' HTTP servers
            try:
                probe.bind((LOCAL_METRICS_ADDRESS, port))
            except OSError:
                busy.append(port)
    return busy


def metrics_ports(first: int, count: int) -> list[int] | str:
    """Worker i's metrics port (first + i, or any free ones for 0), or what to do when one is taken:
    found here, a taken port fails in seconds instead of after the workers joined their collectives
    (JAX's exit then waits minutes at its shutdown barrier for the peer that died)."""
    if first == 0:
        return free_ports(count)
    wanted = list(range(first, first + count))
    busy = busy_ports(wanted)
    if not busy:
        return wanted
    listed = ", ".join(f"{LOCAL_METRICS_ADDRESS}:{port}" for port in busy)
    return (
        f"--metrics-port: {listed} already in use (another local run, or a Prometheus?); "
        f"pass --metrics-port P with P to P+{count - 1} free, or --metrics-port 0 for any free ones"
    )


def run_local(args: argparse.Namespace) -> int:
    if not args.local:
        print(
            "tpujob run: only --local is supported; on a cluster, `kubectl apply -f` the manifest",
            file=sys.stderr,
        )
        return 2
    job = load_one_job(args.file)
    job_dir = (args.work_dir / job.metadata.name).resolve()
    checkpoint_dir = local_checkpoint_dir(job.spec.trainer.checkpoint_dir, args.checkpoint_dir, job_dir)
    if args.fresh and checkpoint_dir and "://" not in checkpoint_dir:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    export_dir = local_export_dir(job.spec.trainer.export_dir, args.export_dir, checkpoint_dir, job_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    hosts = slice_shape(job).hosts * job.spec.tpu.slices
    ports = metrics_ports(args.metrics_port, hosts)
    if isinstance(ports, str):
        say(ports)
        return 2
    try:
        workers = plan_workers(
            job,
            python=sys.executable,
            base_env=dict(os.environ),
            worker_ports=free_ports(hosts),
            metrics_ports=ports,
            job_dir=job_dir,
            checkpoint_dir=checkpoint_dir,
            progress_bar=sys.stderr.isatty(),
            mounts=tuple(args.mount),
            export_dir=export_dir,
        )
    except CannotRunLocally as error:
        for problem in error.problems:
            say(f"spec.trainer.env: {problem}")
        return 2
    for worker in workers:
        with contextlib.suppress(FileNotFoundError):
            worker.summary_file.unlink()
    say(f"{job.metadata.name}: {hosts} local worker(s) for {job.spec.tpu.type} {job.spec.tpu.topology}")
    say(f"  command: {' '.join(workers[0].command)}")
    say(f"  checkpoints: {checkpoint_dir or '(none: spec.trainer.checkpointDir is not set)'}")
    say(f"  export: {export_dir or '(none: neither spec.trainer.exportDir nor checkpointDir is set)'}")
    urls = (f"http://{LOCAL_METRICS_ADDRESS}:{w.metrics_port}/metrics" for w in workers)
    say("  metrics: " + ", ".join(urls))
    say(f"  logs: {job_dir}/worker-*.log")
    for note in cluster_only_notes(job, tuple(args.mount)):
        say(f"  on GKE only: {note}")

    started = time.monotonic()
    exit_codes = LocalRun(workers, job.spec.trainer.termination_grace_period_seconds).wait()
    elapsed = time.monotonic() - started
    code = overall_exit_code(exit_codes)
    summary = _read_summary(workers[0].summary_file)
    if summary is not None:
        print(json.dumps(summary, indent=2, sort_keys=True), flush=True)
    status = "succeeded" if code == 0 else f"failed (exit codes {exit_codes})"
    accuracy = summary.get("test_accuracy") if summary else None
    detail = f", test accuracy {accuracy}" if accuracy is not None else ""
    say(f"{job.metadata.name}: {status} in {elapsed:.1f}s{detail}")
    if summary and summary.get("export_dir"):
        say(f"  exported for serving to {summary['export_dir']}; load it with {summary.get('export_hint')}")
    return code


def _read_summary(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data
