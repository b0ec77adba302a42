"""The test bed: a real Kubernetes control plane plus simulated GKE and kubelet (`tpujob sandbox`).

    tpujob sandbox up --dir DIR      # background; writes DIR/kubeconfig and DIR/sandbox.json
    tpujob sandbox status --dir DIR
    tpujob sandbox down --dir DIR    # stops every process it started; logs stay in DIR/logs

Parts (each module says more):
- binaries: etcd, kube-apiserver, kube-scheduler, kube-controller-manager from KUBEBUILDER_ASSETS, the cache
  (~/.cache/tpujob/kubernetes-1.20.2) or built once from Debian's Kubernetes source package.
- controlplane: the real control plane on loopback (token auth, RBAC, service accounts, GC, scheduler).
- gke (+ gke_facts): GKE's cluster, node pool and operation REST API as GKE behaves (release channels,
  zones, capacity, quota, asynchronous stockouts, workload policies), faults on demand; registers TPU Nodes.
- kubelet_sim: pod phases for pods on those nodes; the trainer image runs as a local process.
- bed: all of it as one `Sandbox` (what the pytest fixtures in tests/conftest.py hand out).
"""
