"""Every name the operator shares with the cluster, defined once."""

from typing import Final

GROUP: Final = "tpujob.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "TPUJob"
PLURAL: Final = "tpujobs"
SINGULAR: Final = "tpujob"
SHORT_NAMES: Final = ("tj",)
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Labels on every pod, Service and node pool the operator makes.
LABEL_JOB_NAME: Final = f"{GROUP}/job-name"
LABEL_SLICE: Final = f"{GROUP}/slice"
LABEL_WORKER: Final = f"{GROUP}/worker"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "tpujob-operator"

# GKE node pool labels (GCE label rules: lowercase, digits, '-', '_'; at most 63 characters; no dots).
POOL_LABEL_MANAGED_BY: Final = "tpujob-managed-by"
POOL_LABEL_NAMESPACE: Final = "tpujob-namespace"
POOL_LABEL_JOB: Final = "tpujob-job"
POOL_LABEL_JOB_UID: Final = "tpujob-job-uid"
POOL_LABEL_SLICE: Final = "tpujob-slice"
POOL_LABEL_PREFIX: Final = "tpujob-"
# The taint on every node of a pool the operator makes (value: the job's UID, effect NoSchedule): only that
# job's pods tolerate it, so no other job (of any namespace, with policy: existing) lands on its TPUs.
POOL_TAINT_KEY: Final = f"{GROUP}/job-uid"

FINALIZER: Final = f"{GROUP}/cleanup"
# The attempt a pod belongs to: a restart recreates every pod with the next attempt.
LABEL_ATTEMPT: Final = f"{GROUP}/attempt"
# The attempt a worker's trainer is to run (restartStrategy RecreateSlice): the attempt that created the pod,
# then each later one its pod is kept through; a downward API volume shows it to the trainer as a file.
ANNOTATION_RESTART_ATTEMPT: Final = f"{GROUP}/restart-attempt"

# GKE / TPU names on nodes and pods.
NODE_LABEL_ACCELERATOR: Final = "cloud.google.com/gke-tpu-accelerator"
NODE_LABEL_TOPOLOGY: Final = "cloud.google.com/gke-tpu-topology"
NODE_LABEL_NODEPOOL: Final = "cloud.google.com/gke-nodepool"
NODE_LABEL_SPOT: Final = "cloud.google.com/gke-spot"
NODE_LABEL_INSTANCE_TYPE: Final = "node.kubernetes.io/instance-type"  # the node's machine type
NODE_LABEL_FLEX_START: Final = "cloud.google.com/gke-flex-start"  # on flex-start nodes (GKE docs)
TPU_RESOURCE: Final = "google.com/tpu"
TPU_TAINT_KEY: Final = "google.com/tpu"
SPOT_TAINT_KEY: Final = "cloud.google.com/gke-spot"

# Ports (reference/gke-tpu.md).
PORT_TPU_ICI: Final = 8471
PORT_MEGASCALE: Final = 8080
PORT_TF_WORKER: Final = 8470
PORT_TPU_RUNTIME_METRICS: Final = 8431
PORT_TRAINER_METRICS: Final = 9090
# The trainer container's port of that name serves Prometheus text: the operator reads the step counter there
# (tpujob_trainer_global_step, _target_steps, _last_checkpoint_step, _last_checkpoint_timestamp_seconds).
METRICS_PORT_NAME: Final = "metrics"

# The trainer's exit code for "stopped by SIGTERM after saving a checkpoint" (spot reclaim, maintenance). Not
# evidence of a preemption by itself (any SIGTERM gives it): the operator looks at what Kubernetes left on the
# pod (status/model.py is_infrastructure_failure).
EXIT_CODE_PREEMPTED: Final = 143
# The trainer's exit code for missing or invalid settings (a ConfigError, a bad flag): retrying cannot help,
# so the default failurePolicy fails the job at once (Python's own usage errors exit 2 as well).
EXIT_CODE_BAD_CONFIG: Final = 2
# The trainer's progress facts for goodput accounting: the last line of its termination message is this
# prefix and one compact JSON object (see status/goodput.py); the line before it stays the human reason.
PROGRESS_LINE_PREFIX: Final = "tpujob-progress "

# The trainer's container in every worker pod: sidecars and init containers may not take its name.
TRAINER_CONTAINER: Final = "trainer"
# Cloud Storage FUSE on GKE: CSI volumes of this driver need the pod annotation, which makes GKE's webhook
# inject the gcsfuse sidecar (https://cloud.google.com/kubernetes-engine/docs/how-to/
# cloud-storage-fuse-csi-driver-ephemeral; GoogleCloudPlatform/gcs-fuse-csi-driver docs/usage.md).
GCSFUSE_CSI_DRIVER: Final = "gcsfuse.csi.storage.gke.io"
GCSFUSE_VOLUMES_ANNOTATION: Final = "gke-gcsfuse/volumes"

# Kueue (kubernetes-sigs/kueue v0.19): a job labelled with a queue name is admitted through a Workload the
# operator creates, as Kueue's job integrations do (pkg/controller/jobframework; names from
# apis/kueue/v1beta2 and pkg/controller/constants).
KUEUE_GROUP: Final = "kueue.x-k8s.io"
KUEUE_VISIBILITY_GROUP: Final = f"visibility.{KUEUE_GROUP}"  # its pending workloads: status/queue_position.py
KUEUE_WORKLOAD_CRD: Final = f"workloads.{KUEUE_GROUP}"  # its versions and pod-set cap: render/workload.py
LABEL_QUEUE_NAME: Final = f"{KUEUE_GROUP}/queue-name"
LABEL_PRIORITY_CLASS: Final = f"{KUEUE_GROUP}/priority-class"  # a WorkloadPriorityClass' name
LABEL_KUEUE_JOB_UID: Final = f"{KUEUE_GROUP}/job-uid"  # on the Workload: its job's UID
KUEUE_FINALIZER: Final = f"{KUEUE_GROUP}/resource-in-use"  # on the Workload until its job lets it go
