"""A simulated kubelet for the simulated GKE nodes.

It does what a kubelet does to the API: posts a bound pod's status (Running, then Succeeded or Failed),
finishes graceful deletions, and on node shutdown fails the node's pods the way a real node loss leaves them.

A pod's "container" ends:
- on command: `KubeletSimulator.succeed/fail`, or the annotation `sandbox.tpujob.dev/exit-code: "<n>"`;
- or, when the image is the trainer image or a local image, as a real local process running the container's
  command with the pod's env: the phase follows its exit code, and deleting the pod sends it SIGTERM (SIGKILL
  after the grace period), as the container runtime would; `KubeletSimulator.oom_kill` SIGKILLs it as the
  OOM killer does (exit 137, reason OOMKilled, the termination log as the process left it).

Which images run locally (matched by the repository's last path segment, any registry, tag or digest):
- the trainer images ("tpujob-trainer*"): command, else the image's entrypoint `python -m tpujob_trainer`,
  + args, with the pod's env as is;
- local images (`LocalImage`: a prefix and image-directory -> local-directory mappings): "tpujob-jax*",
  the JAX example's image, whose /app is the repo's examples/jax, and any named in the env
  TPUJOB_SANDBOX_LOCAL_IMAGES (`PREFIX[:IMAGE_DIR=LOCAL_DIR[,...]]`, ";" between images; read by
  `start_sandbox`). Their command + args run as given, with paths under an image directory mapped (argv,
  env values, workingDir) and, since there is no cluster DNS, the pod's peers' names in env values
  (<hostname>.<subdomain>[.<namespace>...], e.g. TPU_WORKER_HOSTNAMES) replaced by 127.0.0.1, where every
  local process listens.
In both, `python`/`python3` is the kubelet's own interpreter (which must have what the image would: the
trainer, jax ...); all processes share the host's network, so two pods' listeners need different ports.
A trainer-image container whose command is `python -m tpujob_trainer` starts as a fork of an interpreter
that imported the trainer's modules once (tpujob_sandbox.forkserver): the same program from its main on,
with the pod's env, working directory, log and a process group of its own, without importing TensorFlow
again (about 5 CPU-seconds each). What the imports print goes to that server's log, not the pod's, and a
pod whose env sets a variable read at import (PYTHON*, TF_CPP_*, KERAS_* ...) starts a fresh interpreter.

A local process writes its termination message to the file TPUJOB_TERMINATION_LOG names (in place of
/dev/termination-log); when it exits, that file, else with `terminationMessagePolicy: FallbackToLogsOnError`
and a failure the end of its log, becomes `state.terminated.message`, within Kubernetes' limits
(podstatus.termination_message). `fail(..., message=...)` sets the message of a pod without a process.

Preemption (`preempt_node`) follows GKE's graceful node shutdown on spot reclaim / host maintenance: every
container gets SIGTERM and the shutdown grace period, each pod ends `Failed` with reason `Terminated` and
message "Pod was terminated in response to imminent node shutdown." plus a `DisruptionTarget` condition, and
the Node object goes away with the VM. The Failed pods stay until someone deletes them (or PodGC does).

Modules: podstatus (env, command line and statuses: pure), config (a container's env and mounts as the
kubelet resolves them), startup (what is checked before containers start), images (image pulls), containers
(trainer-image and local-image containers as local processes), tpuruntime (what a pod's TPU runtime tells
the device plugin), shutdown (graceful node shutdown), podwatch (list/watch and the work thread), simulator
(`KubeletSimulator`, which drives them).
"""

from tpujob_sandbox.kubelet.containers import LocalContainers
from tpujob_sandbox.kubelet.podstatus import (
    DEFAULT_LOCAL_IMAGES,
    DEFAULT_TRAINER_ENTRYPOINT,
    DEFAULT_TRAINER_IMAGES,
    ENV_LOCAL_IMAGES,
    EXIT_CODE_ANNOTATION,
    EXIT_CODE_SIGTERM,
    EXIT_CODE_START_ERROR,
    EXIT_MESSAGE_ANNOTATION,
    NOT_READY_TAINT,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_REASON,
    LocalImage,
    container_argv,
    container_env,
    is_trainer_image,
    local_image_for,
    map_path,
    parse_local_images,
    resolve_pod_names,
    restarts_container,
    running_status,
    terminated_status,
)
from tpujob_sandbox.kubelet.shutdown import NodeShutdown
from tpujob_sandbox.kubelet.simulator import KubeletSimulator

__all__ = [
    "DEFAULT_LOCAL_IMAGES",
    "DEFAULT_TRAINER_ENTRYPOINT",
    "DEFAULT_TRAINER_IMAGES",
    "ENV_LOCAL_IMAGES",
    "EXIT_CODE_ANNOTATION",
    "EXIT_CODE_SIGTERM",
    "EXIT_CODE_START_ERROR",
    "EXIT_MESSAGE_ANNOTATION",
    "NOT_READY_TAINT",
    "SHUTDOWN_MESSAGE",
    "SHUTDOWN_REASON",
    "KubeletSimulator",
    "LocalContainers",
    "LocalImage",
    "NodeShutdown",
    "container_argv",
    "container_env",
    "is_trainer_image",
    "local_image_for",
    "map_path",
    "parse_local_images",
    "resolve_pod_names",
    "restarts_container",
    "running_status",
    "terminated_status",
]
