"""The test bed: a real Kubernetes control plane plus simulated GKE and kubelet (`tpujob sandbox`)."""
