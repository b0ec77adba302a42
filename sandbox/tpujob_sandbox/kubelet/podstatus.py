"""What a kubelet computes for a pod without asking anyone: the container's env and command line, and the
pod statuses it posts (Running, restarted, terminated). Pure functions and constants, no I/O."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_CODE_ANNOTATION = "sandbox.tpujob.dev/exit-code"
EXIT_MESSAGE_ANNOTATION = "sandbox.tpujob.dev/exit-message"
DEFAULT_TRAINER_IMAGES = ("tpujob-trainer",)
# The trainer image's ENTRYPOINT: what runs when a pod gives only args.
DEFAULT_TRAINER_ENTRYPOINT = ("python", "-m", "tpujob_trainer")
# The JAX example (examples/jax) as its image would hold it: train.py at /app.
JAX_EXAMPLE_DIR = Path(__file__).resolve().parents[3] / "examples" / "jax"
# Pod DNS names in a bring-your-own image's env resolve here: every local process listens on loopback.
LOCAL_POD_ADDRESS = "127.0.0.1"
SHUTDOWN_REASON = "Terminated"
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
EXIT_CODE_SIGTERM = 143
EXIT_CODE_START_ERROR = 128
# A container's termination message, as a kubelet reads it when the container ends
# (https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/; kubelet's
# kuberuntime getTerminationMessage and readLastStringFromContainerLogs, the limits in
# pkg/kubelet/container/runtime.go): the file at terminationMessagePath, its last 4096 bytes; with
# terminationMessagePolicy FallbackToLogsOnError, a non-zero exit and an empty (or missing) file, the end of
# the container's log: its last 80 lines, of which the last 2048 bytes. A local process cannot have
# /dev/termination-log mounted: it gets a file of its own, its path in the trainer contract's
# ENV_TERMINATION_LOG (containers.py).
FALLBACK_TO_LOGS_ON_ERROR = "FallbackToLogsOnError"
MAX_TERMINATION_MESSAGE_BYTES = 4096
MAX_TERMINATION_MESSAGE_LOG_LINES = 80
MAX_TERMINATION_MESSAGE_LOG_BYTES = 2048


def status_time() -> str:
    """Now, as a kubelet writes times into a pod or node status (whole seconds, UTC)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def is_trainer_image(image: str, trainer_images: tuple[str, ...]) -> bool:
    """`registry/path/tpujob-trainer:tag` matches "tpujob-trainer": the last path segment, any tag."""
    repository = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]
    return any(repository.startswith(prefix) for prefix in trainer_images)


@dataclass(frozen=True)
class LocalImage:
    """An image besides the trainer's whose containers run as local processes, and how.

    The container's command (else `entrypoint`) and args run as given, `python`/`python3` being this
    kubelet's interpreter. `paths` maps directories of the image to local ones: an argv word, env value or
    workingDir at or under an image directory is rewritten to the local one. There is no cluster DNS here:
    in env values, the pod's peers' names (<hostname>.<subdomain>[.<namespace>[.svc[.cluster.local]]]) become
    127.0.0.1, where their processes listen.
    """

    prefix: str  # matched as trainer images are: the repository's last path segment, any tag or digest
    paths: tuple[tuple[str, str], ...] = ()
    entrypoint: tuple[str, ...] = ()


# More local images for a test bed (`tpujob-sandbox up`, the pytest fixtures): see parse_local_images.
ENV_LOCAL_IMAGES = "TPUJOB_SANDBOX_LOCAL_IMAGES"
DEFAULT_LOCAL_IMAGES = (LocalImage("tpujob-jax", paths=(("/app", str(JAX_EXAMPLE_DIR)),)),)


def parse_local_images(text: str) -> tuple[LocalImage, ...]:
    """`PREFIX[:IMAGE_DIR=LOCAL_DIR[,...]]` entries separated by ";", e.g.
    "my-jax:/app=/home/me/src;my-torch" (how TPUJOB_SANDBOX_LOCAL_IMAGES names more local images)."""
    images = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        prefix, _, mappings = entry.partition(":")
        paths = []
        for mapping in filter(None, mappings.split(",")):
            image_dir, sep, local_dir = mapping.partition("=")
            if not sep or not image_dir.startswith("/") or not local_dir:
                raise ValueError(f"local image {prefix!r}: {mapping!r} is not IMAGE_DIR=LOCAL_DIR")
            paths.append((image_dir.rstrip("/") or "/", local_dir))
        images.append(LocalImage(prefix, paths=tuple(paths)))
    return tuple(images)


def local_image_for(image: str, local_images: tuple[LocalImage, ...]) -> LocalImage | None:
    return next((li for li in local_images if is_trainer_image(image, (li.prefix,))), None)


def map_path(word: str, paths: tuple[tuple[str, str], ...]) -> str:
    """`/app/train.py` with ("/app", "/repo/examples/jax") is "/repo/examples/jax/train.py"."""
    for image_dir, local_dir in paths:
        if word == image_dir or word.startswith(image_dir.rstrip("/") + "/"):
            return local_dir.rstrip("/") + word[len(image_dir.rstrip("/")) :]
    return word


# A gs:// path as a whole word or after '=' (--checkpoint-dir=gs://...).
_GCS_PATH = re.compile(r"(?:(?<=^)|(?<==))gs://")


def map_gcs(word: str, root: Path) -> str:
    """`gs://bucket/path` is `<root>/bucket/path`: Cloud Storage cannot exist here, so each bucket is a folder
    (the one a GCS FUSE volume of the bucket mounts too), as `tpujob run --local` makes gs:// local."""
    return _GCS_PATH.sub(str(root).rstrip("/") + "/", word)


def resolve_pod_names(pod: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """Env values with the names of the pod's subdomain (a headless Service's pods) as LOCAL_POD_ADDRESS."""
    subdomain, namespace = pod["spec"].get("subdomain"), pod["metadata"].get("namespace") or ""
    if not subdomain:
        return env
    suffix = rf"\.{re.escape(subdomain)}(?:\.{re.escape(namespace)}(?:\.svc(?:\.cluster\.local)?)?)?"
    name = re.compile(rf"(?<![-\w.])[a-z0-9](?:[-a-z0-9]*[a-z0-9])?{suffix}(?![-\w.])")
    return {key: name.sub(LOCAL_POD_ADDRESS, value) for key, value in env.items()}


def _field_value(pod: dict[str, Any], path: str) -> str:
    metadata, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
    }
    if path in simple:
        return simple[path] or ""
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(prefix + "['"):
            return str((metadata.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    raise ValueError(f"unsupported fieldRef {path}")


def container_env(
    pod: dict[str, Any], container: dict[str, Any], referenced: dict[str, str] | None = None
) -> dict[str, str]:
    """The container's env as the kubelet would compute it: envFrom, then literal values, downward-API fields
    and `referenced` (the values of its Secret and ConfigMap references, config.referenced_env: envFrom's
    keys and env's secretKeyRef/configMapKeyRef, an optional one that is absent left out).

    Later entries may refer to earlier ones with $(NAME), as in Kubernetes.
    """
    referenced = referenced or {}
    names = {entry["name"] for entry in container.get("env") or []}
    env: dict[str, str] = {name: value for name, value in referenced.items() if name not in names}
    for entry in container.get("env") or []:
        value_from = entry.get("valueFrom")
        if not value_from:
            env[entry["name"]] = _expand(entry.get("value") or "", env)
        elif field_ref := value_from.get("fieldRef"):
            env[entry["name"]] = _field_value(pod, field_ref["fieldPath"])
        elif entry["name"] in referenced:
            env[entry["name"]] = referenced[entry["name"]]
        elif not ({"secretKeyRef", "configMapKeyRef"} & set(value_from)):
            raise ValueError(
                f"env {entry['name']}: only fieldRef, secretKeyRef and configMapKeyRef are simulated"
            )
    return env


def _expand(text: str, env: dict[str, str]) -> str:
    for name, value in env.items():
        text = text.replace(f"$({name})", value)
    return text


def container_argv(
    container: dict[str, Any], env: dict[str, str], python: str, entrypoint: tuple[str, ...]
) -> list[str]:
    """command (else the image's entrypoint) + args, $(VAR) expanded; `python`/`python3` run this
    interpreter, which has the trainer installed."""
    command = container.get("command") or list(entrypoint)
    argv = [_expand(part, env) for part in command + (container.get("args") or [])]
    if not command:
        raise ValueError(
            f"container {container['name']}: no command, and image {container['image']}'s "
            "entrypoint is not known here"
        )
    if argv[0] in ("python", "python3"):
        argv[0] = python
    return argv


def running_status(pod: dict[str, Any], pod_ip: str, host_ip: str, restarts: int = 0) -> dict[str, Any]:
    now = status_time()
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"sandbox://{c['image']}",
            "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "state": {"running": {"startedAt": now}},
        }
        for c in pod["spec"]["containers"]
    ]
    return {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": (pod.get("status") or {}).get("startTime") or now,
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": now}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": statuses,
    }


def restarted_status(
    pod: dict[str, Any], pod_ip: str, host_ip: str, restarts: int, exit_code: int
) -> dict[str, Any]:
    """Running again after the container exited with `exit_code`: that exit is each container's lastState."""
    status = running_status(pod, pod_ip, host_ip, restarts)
    for container_status in status["containerStatuses"]:
        container_status["lastState"] = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Error" if exit_code else "Completed",
                "finishedAt": status_time(),
            }
        }
    return status


def terminated_status(
    pod: dict[str, Any],
    exit_code: int,
    *,
    reason: str = "",
    message: str = "",
    pod_reason: str = "",
    pod_message: str = "",
    extra_conditions: tuple[dict[str, str], ...] = (),
) -> dict[str, Any]:
    """Terminal status: Succeeded when every container exited 0, else Failed."""
    now = status_time()
    status = pod.get("status") or {}
    container_reason = reason or ("Completed" if exit_code == 0 else "Error")
    previous = {s["name"]: s for s in status.get("containerStatuses") or []}
    statuses = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"sandbox://{c['image']}",
            "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
            "ready": False,
            "started": False,
            "restartCount": previous.get(c["name"], {}).get("restartCount", 0),
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": container_reason,
                    **({"message": message} if message else {}),
                    "startedAt": status.get("startTime") or now,
                    "finishedAt": now,
                    "containerID": f"sandbox://{pod['metadata']['uid']}/{c['name']}",
                }
            },
        }
        for c in pod["spec"]["containers"]
    ]
    conditions = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        *extra_conditions,
    ]
    result: dict[str, Any] = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "conditions": conditions,
        "containerStatuses": statuses,
    }
    if pod_reason:
        result["reason"], result["message"] = pod_reason, pod_message
    return result


# The kubelet's admission failure when the device manager's Allocate call to a device plugin fails (the TPU
# device plugin down or its devices gone): kubernetes pkg/kubelet/cm/topologymanager and
# pkg/kubelet/lifecycle, the admit handlers' UnexpectedAdmissionError.
ADMISSION_ERROR_REASON = "UnexpectedAdmissionError"


def rejected_status(pod: dict[str, Any], error: str) -> dict[str, Any]:
    """A pod the kubelet refused to admit: it never starts a container. As kubelet.go rejectPod writes it:
    phase Failed, the admit handler's reason, "Pod was rejected: " and its message ("Allocate failed due to
    <the device plugin's error>, which is unexpected")."""
    now = status_time()
    return {
        "phase": "Failed",
        "reason": ADMISSION_ERROR_REASON,
        "message": f"Pod was rejected: Allocate failed due to {error}, which is unexpected",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}],
        "startTime": (pod.get("status") or {}).get("startTime") or now,
    }


def termination_message(container: dict[str, Any], exit_code: int, written: bytes, log: bytes) -> str:
    """The message a kubelet puts in state.terminated.message: what the container `written` to its
    termination log, else (FallbackToLogsOnError and a failure) the end of this container's `log`."""
    if written:
        return written[-MAX_TERMINATION_MESSAGE_BYTES:].decode("utf-8", errors="replace")
    if container.get("terminationMessagePolicy") != FALLBACK_TO_LOGS_ON_ERROR or exit_code == 0:
        return ""
    lines = log.splitlines(keepends=True)[-MAX_TERMINATION_MESSAGE_LOG_LINES:]
    return b"".join(lines)[-MAX_TERMINATION_MESSAGE_LOG_BYTES:].decode("utf-8", errors="replace")


def restarts_container(restart_policy: str, exit_code: int) -> bool:
    return restart_policy == "Always" or (restart_policy == "OnFailure" and exit_code != 0)


def shell_exit_code(returncode: int) -> int:
    """Popen reports death by signal N as -N; a container runtime reports 128 + N."""
    return 128 - returncode if returncode < 0 else returncode
