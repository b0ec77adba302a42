"""Kueue in the test bed: its real CRDs (v0.19.2, TPUJOB_KUEUE_CRDS) on the 1.36 CRD server, and a simulator
of what Kueue's own controllers do (admission, preemption, waitForPodsReady, queue statuses), modelled on
Kueue's source. The pure model: objects, quantity, requests, assign, scheduler, workloads, queues, model;
tas (topology-aware scheduling) and visibility (the visibility API's answers).
Its settings: config (Kueue's Configuration, e.g. waitForPodsReady); admission checks' states: checks (pure),
and the ProvisioningRequest check's controller: provisioning. The I/O: crds (install/uninstall, one
release at a time), discovery (the Workload version served), simulator (watch, run the model, write
statuses), visibility_server (Kueue's visibility API behind the aggregator), handle (fixtures)."""
