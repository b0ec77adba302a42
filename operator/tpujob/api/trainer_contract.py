"""The env contract between the operator and the trainer it runs, written once: the names of every variable
the operator (render/plan.py worker_env), `tpujob run --local` (localrun.py) and the test bed's kubelet set
for a trainer. The README's "Bring your own image: the env contract" says what each carries and when.

The trainer image (`tpujob-trainer`) ships without this package, so it keeps its own copies
(trainer-image/tpujob_trainer/constants.py); tests/unit/test_trainer_contract.py proves they agree.
Pure: names only, no imports.
"""

from typing import Final

# The slice's identity and wiring, as GKE's TPU webhook, libtpu and JAX name them (reference/gke-tpu.md).
ENV_WORKER_ID: Final = "TPU_WORKER_ID"  # this host's index in its slice
ENV_WORKER_HOSTNAMES: Final = "TPU_WORKER_HOSTNAMES"  # the slice's hosts by worker id
# Multi-host tpu7x only: host:port of each worker by worker id, and the port (KubeRay's TPU webhook's names).
ENV_PROCESS_ADDRESSES: Final = "TPU_PROCESS_ADDRESSES"
ENV_PROCESS_PORT: Final = "TPU_PROCESS_PORT"
# Multislice only (slices > 1): libtpu's cross-slice (DCN) wiring.
ENV_MEGASCALE_COORDINATOR_ADDRESS: Final = "MEGASCALE_COORDINATOR_ADDRESS"
ENV_MEGASCALE_NUM_SLICES: Final = "MEGASCALE_NUM_SLICES"
ENV_MEGASCALE_SLICE_ID: Final = "MEGASCALE_SLICE_ID"
ENV_MEGASCALE_PORT: Final = "MEGASCALE_PORT"

# The operator's own, under TPUJOB_ and reserved by name: the default trainer's settings share the prefix
# (TPUJOB_BATCH_SIZE, TPUJOB_EPOCHS, ...: trainer-image/README.md) and stay the user's.
ENV_JOB_NAME: Final = "TPUJOB_NAME"
ENV_NAMESPACE: Final = "TPUJOB_NAMESPACE"
ENV_ATTEMPT: Final = "TPUJOB_ATTEMPT"
ENV_NUM_SLICES: Final = "TPUJOB_NUM_SLICES"
ENV_CHECKPOINT_DIR: Final = "TPUJOB_CHECKPOINT_DIR"  # when spec.trainer.checkpointDir is set
ENV_EXPORT_DIR: Final = "TPUJOB_EXPORT_DIR"  # when exportDir or checkpointDir is set
ENV_METRICS_PORT: Final = "TPUJOB_METRICS_PORT"
# restartStrategy RecreateSlice: the file (a downward API volume of the pod's annotation
# tpujob.dev/restart-attempt) whose number rises when the trainer is to restart its training process in
# place, as that attempt (TPUJOB_ATTEMPT of the new process).
ENV_RESTART_ATTEMPT_FILE: Final = "TPUJOB_RESTART_ATTEMPT_FILE"
RESTART_ATTEMPT_DIR: Final = "/etc/tpujob/restart"
RESTART_ATTEMPT_FILE_NAME: Final = "attempt"
OPERATOR_TPUJOB_ENV: Final = frozenset(
    {
        ENV_JOB_NAME,
        ENV_NAMESPACE,
        ENV_ATTEMPT,
        ENV_NUM_SLICES,
        ENV_CHECKPOINT_DIR,
        ENV_EXPORT_DIR,
        ENV_METRICS_PORT,
        ENV_RESTART_ATTEMPT_FILE,
    }
)

# The address a trainer binds its metrics port to; unset: every interface (as in a pod's own network
# namespace). The operator never sets it: the test bed's kubelet does, since its pods share the host's network
# and each binds its own loopback IP. A bring-your-own image that reads it runs on the test bed too.
ENV_METRICS_ADDRESS: Final = "TPUJOB_METRICS_ADDRESS"

# Where a worker writes why it ended: in a pod, Kubernetes' default terminationMessagePath
# (/dev/termination-log); a process the test bed's kubelet runs has none, so it gets a file of its own,
# named by this variable.
ENV_TERMINATION_LOG: Final = "TPUJOB_TERMINATION_LOG"

# `tpujob run --local` only: where each worker writes its final JSON summary, and worker 0's progress bar.
ENV_SUMMARY_FILE: Final = "TPUJOB_SUMMARY_FILE"
ENV_PROGRESS: Final = "TPUJOB_PROGRESS"
