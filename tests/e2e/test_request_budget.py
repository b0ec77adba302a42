"""What one plain job costs in API requests, counted by the test bed's API server (its audit log of the
operator's ServiceAccount: tpujob_sandbox.bed.OPERATOR_USER), in this job's namespace. The list is written
here: the next feature that adds a request per job fails this test and is seen in review (issue #51). The
race against the Job controller (bench/operator_bench.py) counts the same at scale."""

from __future__ import annotations

import json
from collections import Counter

from tests.manifests import plain_job
from tpujob_sandbox import wait_for
from tpujob_sandbox.bed import OPERATOR_USER


def requests_in(sandbox, namespace: str) -> Counter[str]:
    """`verb resource[/subresource]` -> the operator's completed requests in `namespace`."""
    counts: Counter[str] = Counter()
    for line in sandbox.control_plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if event["user"]["username"] != OPERATOR_USER or ref.get("namespace") != namespace:
            continue
        if event.get("stage") != "ResponseComplete":
            continue
        sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
        counts[f"{event['verb']} {ref.get('resource')}{sub}"] += 1
    return counts


# One plain job (one host; its node pool made and deleted through the simulated GKE, which costs no Kubernetes
# request) from create to Succeeded, the namespace's first: each request a line, with why. Status writes and
# Events may coalesce: at most these.
CREATES = Counter(
    {
        "create networkpolicies": 1,  # the namespace's workers' policy: its first job makes it
        "create pods": 1,
        "create services": 1,
        "patch tpujobs": 1,  # the finalizer
    }
)
AT_MOST = Counter(
    {
        # Provisioning, Starting, Running, Succeeded (the pod's exit with it), and the pool seen deleted after
        # (when GKE's delete ends after the Succeeded write: its chip-seconds are charged until then)
        "patch tpujobs/status": 5,
        "create events": 4,  # Provisioning, Starting, Running, Succeeded
    }
)


def test_one_plain_job_costs_the_requests_written_here(sandbox, jobs, kubelet):
    jobs.create(plain_job("train"))
    (pod,) = jobs.wait_pods_running("train", 1)
    jobs.wait_phase("train", "Running")
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("train", "Succeeded")
    jobs.wait_events("train", "Succeeded")  # the last Event: the ones before it were posted (one poster)
    # The creates exact, the rest within their bounds, nothing else: what a pass writes is in the log once
    # the request completed, so the wait ends when all are there; one request too many never ends it.
    wait_for(
        lambda: +requests_in(sandbox, jobs.namespace) - AT_MOST == CREATES,
        timeout=30,
        what=f"exactly {dict(CREATES)} and at most {dict(AT_MOST)}",
        last_state=lambda: sorted(requests_in(sandbox, jobs.namespace).items()),
    )
    second = plain_job("again")
    jobs.create(second)
    (pod,) = jobs.wait_pods_running("again", 1)
    kubelet.succeed(jobs.namespace, pod.metadata.name)
    jobs.wait_phase("again", "Succeeded")
    jobs.wait_events("again", "Succeeded")
    # The namespace's second job: its pods are guarded by the first one's policy, no request of its own.
    twice = CREATES + CREATES - Counter({"create networkpolicies": 1})
    wait_for(
        lambda: +requests_in(sandbox, jobs.namespace) - AT_MOST - AT_MOST == twice,
        timeout=30,
        what=f"exactly {dict(twice)} for two jobs",
        last_state=lambda: sorted(requests_in(sandbox, jobs.namespace).items()),
    )
