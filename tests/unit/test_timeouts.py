"""A dead connection does not hang a pass: against a listener that accepts and never answers (a peer gone,
a proxy black-holing the traffic), a Kubernetes call and a GKE call each end at their timeout with an
error the pass handles (the pass is retried)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tpujob import gke, kube
from tpujob.render import Cluster

# Far above the timeouts under test (and their client's retries), far below "for good".
HANG_BOUND_SECONDS = 20


@pytest.fixture
def black_hole() -> Iterator[str]:
    """host:port of a socket that completes TCP handshakes (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def outcome_of(call: Callable[[], Any]) -> BaseException | None:
    """The exception `call` ended with; fails the test if it has not ended within HANG_BOUND_SECONDS."""
    ended: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # whatever ends it is the result
            ended.append(error)
        else:
            ended.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_BOUND_SECONDS)
    assert ended, f"the call still hangs after {HANG_BOUND_SECONDS} s"
    return ended[0]


def test_a_kubernetes_call_to_a_black_hole_ends_at_the_read_timeout(black_hole: str) -> None:
    configuration = client.Configuration()
    configuration.host = f"http://{black_hole}"
    api = kube.Kube(kube.LimitedApiClient(configuration, None, timeout=(1.0, 0.3)))

    error = outcome_of(lambda: api.get_tpujob("default", "train"))

    assert error is not None and "timed out" in str(error).lower()


def test_without_the_operators_timeout_the_same_call_would_hang(black_hole: str) -> None:
    """Why the timeout is set at the client's one door: the client's own default is none at all."""
    configuration = client.Configuration()
    configuration.host = f"http://{black_hole}"
    api_client = client.ApiClient(configuration)
    custom = client.CustomObjectsApi(api_client)
    ended = threading.Event()

    def call() -> None:
        try:
            custom.get_namespaced_custom_object("tpujob.dev", "v1alpha1", "default", "tpujobs", "train")
        except Exception:  # the listener closes after the test: refused
            pass
        finally:
            ended.set()

    threading.Thread(target=call, daemon=True).start()
    assert not ended.wait(2.0)  # still waiting, with no timeout to end it


def test_a_gke_call_to_a_black_hole_ends_at_its_timeout(black_hole: str) -> None:
    cluster = Cluster(project="p", location="us-central1", cluster="c", zone="us-central1-a")
    pools = gke.NodePools(cluster, gke.make_client(f"http://{black_hole}"), timeout=0.5)

    error = outcome_of(lambda: pools.state(0, "pool"))

    assert error is not None
