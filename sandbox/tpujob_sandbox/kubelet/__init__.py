"""A simulated kubelet for the simulated GKE nodes.

It does what a kubelet does to the API: posts a bound pod's status (Running, then Succeeded or Failed),
finishes graceful deletions, and on node shutdown fails the node's pods the way a real node loss leaves them.

A pod's "container" ends:
- on command: `KubeletSimulator.succeed/fail`, or the annotation `sandbox.tpujob.dev/exit-code: "<n>"`;
- or, when the image is the trainer image, as a real local process running the container's command with the
  pod's env: the phase follows its exit code, and deleting the pod sends it SIGTERM (SIGKILL after the grace
  period), as the container runtime would.

Preemption (`preempt_node`) follows GKE's graceful node shutdown on spot reclaim / host maintenance: every
container gets SIGTERM and the shutdown grace period, each pod ends `Failed` with reason `Terminated` and
message "Pod was terminated in response to imminent node shutdown." plus a `DisruptionTarget` condition, and
the Node object goes away with the VM. The Failed pods stay until someone deletes them (or PodGC does).

Modules: podstatus (env, command line and statuses: pure), containers (trainer-image containers as local
processes), shutdown (graceful node shutdown), podwatch (list/watch and the work thread), simulator
(`KubeletSimulator`, which drives them).
"""

from tpujob_sandbox.kubelet.containers import LocalContainers
from tpujob_sandbox.kubelet.podstatus import (
    DEFAULT_TRAINER_ENTRYPOINT,
    DEFAULT_TRAINER_IMAGES,
    EXIT_CODE_ANNOTATION,
    EXIT_CODE_SIGTERM,
    EXIT_CODE_START_ERROR,
    EXIT_MESSAGE_ANNOTATION,
    NOT_READY_TAINT,
    SHUTDOWN_MESSAGE,
    SHUTDOWN_REASON,
    container_argv,
    container_env,
    is_trainer_image,
    restarts_container,
    running_status,
    terminated_status,
)
from tpujob_sandbox.kubelet.shutdown import NodeShutdown
from tpujob_sandbox.kubelet.simulator import KubeletSimulator

__all__ = [
    "DEFAULT_TRAINER_ENTRYPOINT",
    "DEFAULT_TRAINER_IMAGES",
    "EXIT_CODE_ANNOTATION",
    "EXIT_CODE_SIGTERM",
    "EXIT_CODE_START_ERROR",
    "EXIT_MESSAGE_ANNOTATION",
    "NOT_READY_TAINT",
    "SHUTDOWN_MESSAGE",
    "SHUTDOWN_REASON",
    "KubeletSimulator",
    "LocalContainers",
    "NodeShutdown",
    "container_argv",
    "container_env",
    "is_trainer_image",
    "restarts_container",
    "running_status",
    "terminated_status",
]
