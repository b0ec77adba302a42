"""Names the trainer shares with the operator.

The image ships only this package, so these are copies of `tpujob.api.trainer_contract` (the env) and
`tpujob.api.constants`; tests/unit/test_trainer_contract.py fails when the two drift apart.
"""

from typing import Final

# Exit codes: what the operator reads from the container's terminated state.
EXIT_CODE_SUCCEEDED: Final = 0
EXIT_CODE_FAILED: Final = 1  # training raised: an application failure
EXIT_CODE_BAD_CONFIG: Final = 2  # missing or invalid settings: fix the manifest, do not retry
EXIT_CODE_INTERRUPTED: Final = 130  # SIGINT (Ctrl-C in a local run), after saving a checkpoint
# SIGTERM (spot reclaim, maintenance) after saving a checkpoint: "preempted", not the user's fault.
EXIT_CODE_PREEMPTED: Final = 143

# Where a non-zero exit says why in one line: the container's termination log, which the kubelet puts in the
# pod's state.terminated.message (and the operator in the TPUJob's status). TPUJOB_TERMINATION_LOG names
# another file (the test bed's kubelet, or a pod with its own terminationMessagePath).
ENV_TERMINATION_LOG: Final = "TPUJOB_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG: Final = "/dev/termination-log"
# The last line of the termination message, on every exit but a bad config: this prefix and one compact JSON
# object of progress facts (steps, last checkpoint), which the operator turns into goodput accounting.
PROGRESS_LINE_PREFIX: Final = "tpujob-progress "

PORT_TRAINER_METRICS: Final = 9090
PORT_TF_WORKER: Final = 8470

METRICS_PREFIX: Final = "tpujob_trainer_"

# Environment the operator sets on every worker (reference/gke-tpu.md).
ENV_WORKER_ID: Final = "TPU_WORKER_ID"
ENV_WORKER_HOSTNAMES: Final = "TPU_WORKER_HOSTNAMES"
ENV_MEGASCALE_NUM_SLICES: Final = "MEGASCALE_NUM_SLICES"
ENV_MEGASCALE_SLICE_ID: Final = "MEGASCALE_SLICE_ID"
ENV_MEGASCALE_COORDINATOR_ADDRESS: Final = "MEGASCALE_COORDINATOR_ADDRESS"
ENV_MEGASCALE_PORT: Final = "MEGASCALE_PORT"
ENV_TF_CONFIG: Final = "TF_CONFIG"

# The trainer's own settings; each also has a command-line flag (see config.SETTINGS).
ENV_PREFIX: Final = "TPUJOB_"
ENV_CHECKPOINT_DIR: Final = "TPUJOB_CHECKPOINT_DIR"
ENV_EXPORT_DIR: Final = "TPUJOB_EXPORT_DIR"
# Which attempt of the job this worker belongs to (0 first; the operator counts restarts).
ENV_ATTEMPT: Final = "TPUJOB_ATTEMPT"
# restartStrategy RecreateSlice: the file whose attempt number rises when training is to restart in place
# (inplace.py); the supervisor marks its child so the child trains instead of supervising.
ENV_RESTART_ATTEMPT_FILE: Final = "TPUJOB_RESTART_ATTEMPT_FILE"
ENV_SUPERVISED: Final = "TPUJOB_SUPERVISED"
