"""The tests' recorders: Jobs.recording_pods keeps the last state of a pod the API server deleted (what a
test reads of a finished pod that GKE's drain took away with its pool), Jobs.recording_job every status a
job had."""

from __future__ import annotations

from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob_sandbox import wait_for
from tpujob_sandbox.jobs import Jobs
from tpujob_sandbox.operators import install_crd


def test_a_deleted_pods_last_state_stays_in_the_record(sandbox, core, namespace):
    jobs = Jobs(sandbox, namespace)
    labels = {c.LABEL_JOB_NAME: "recorded", c.LABEL_ATTEMPT: "0"}
    before = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="before", labels=labels),
        spec=k8s.V1PodSpec(containers=[k8s.V1Container(name="c", image="registry.example/sleeper:1")]),
    )
    core.create_namespaced_pod(namespace, before)  # listed when the record starts
    with jobs.recording_pods("recorded") as seen:
        core.create_namespaced_pod(namespace, {**core.api_client.sanitize_for_serialization(before),
                                               "metadata": {"name": "during", "labels": labels}})  # fmt: skip
        core.patch_namespaced_pod("during", namespace, {"metadata": {"annotations": {"last": "words"}}})
        for name in ("before", "during"):
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        wait_for(lambda: not jobs.pods("recorded"), timeout=30, what="both pods gone from the API server")
        wait_for(
            lambda: (
                {p.metadata.name for p in seen.pods(attempt=0)} == {"before", "during"}
                and "during" in {p.metadata.name for p in seen.pods() if p.metadata.annotations}
            ),
            timeout=10,
            what="both pods in the record, the patched one with its annotation",
        )
    assert not seen.pods(attempt=1)
    (during,) = [p for p in seen.pods() if p.metadata.name == "during"]
    assert during.metadata.annotations == {"last": "words"}


def test_a_jobs_record_keeps_each_status_it_had(sandbox, namespace):
    """What a test waits on in a status that the next write replaces (the restart's progress). The session's
    operator may be running (an earlier test on this worker started it) and write the job's status too: the
    record keeps its writes among the test's (one may repeat the test's message), so the test looks only for
    where its own two first appear, by their messages."""
    install_crd(sandbox)
    jobs = Jobs(sandbox, namespace)
    status = k8s.CustomObjectsApi(sandbox.api_client).patch_namespaced_custom_object_status
    written = ["the test's first write", "the test's second write"]
    with jobs.recording_job("recorded") as history:
        jobs.create(plain_job("recorded"))
        jobs.create(plain_job("other"))  # not in the record
        for message in written:
            status(c.GROUP, c.VERSION, namespace, c.PLURAL, "recorded", {"status": {"message": message}})
        first = history.first_status(lambda st: st.get("message") == written[0], timeout=10)

        def in_order() -> bool:  # the operator's writes between keep the message: a write may show twice
            messages = [st.get("message") for st in history.statuses()]
            return all(m in messages for m in written) and messages.index(written[0]) < messages.index(
                written[1]
            )

        wait_for(
            in_order,
            timeout=10,
            what="both statuses in the record, in order",
            last_state=lambda: [st.get("message") for st in history.statuses()],
        )
    assert first["attempt"] == 0  # the whole status, as the API server gave it
    assert {o["metadata"]["name"] for o in history.states()} == {"recorded"}
