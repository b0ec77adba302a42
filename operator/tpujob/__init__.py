"""tpujob: a Kubernetes operator for TPU training on Google Kubernetes Engine.

The pure core (no I/O): api (the TPUJob API, its validation and the CRD), tpu (the TPU catalog), render
(what the operator creates), status (every decision). One pass for a job: reconciler. kopf glue: handlers.

The I/O edges: kube (the Kubernetes calls), kubehttp (their connections), ratelimit (their client-side limit),
kubelogin (who the operator is on the API server), gke and gke_cluster (GKE, and the cluster as GetCluster
shows it), trainer_metrics (worker 0's step counter), metrics and metrics_auth (what Prometheus scrapes, and
who may), peering (active and standby replicas), records (what is kept about a job between passes), logs,
memreport and heap (the operator's log, and its memory on request), config (its TPUJOB_* settings) and rbac
(its permissions).

The command line: cli (`tpujob`), manifests (TPUJob files read, every problem named), localrun and
local_workers (`tpujob run --local`).
"""

__version__ = "0.1.0"
