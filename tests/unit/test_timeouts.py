"""A dead connection does not hang a pass: against a listener that accepts and never answers (a peer gone,
a proxy black-holing the traffic), a Kubernetes call and a GKE call each end at their timeout with an
error the pass handles (the pass is retried)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from lightkube.config.kubeconfig import KubeConfig

from tpujob import gke, kube
from tpujob.api.status import Reason
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


def black_holed_kube(black_hole: str, timeout: kube.Timeout) -> kube.Kube:
    return kube.Kube(kube.http_client(KubeConfig.from_server(f"http://{black_hole}").get(), timeout=timeout))


def test_a_kubernetes_call_to_a_black_hole_ends_at_the_read_timeout(black_hole: str) -> None:
    api = black_holed_kube(black_hole, timeout=(1.0, 0.3))

    error = outcome_of(lambda: api.get_tpujob("default", "train"))

    assert isinstance(error, TimeoutError)


def test_a_peering_read_ends_at_its_own_shorter_timeout(black_hole: str) -> None:
    """The lead loop reads the peering object with a timeout of its own, shorter than the client's."""
    api = black_holed_kube(black_hole, timeout=(1.0, HANG_BOUND_SECONDS * 2))

    error = outcome_of(lambda: api.get_peering("default", None, timeout=(1.0, 0.3)))

    assert isinstance(error, TimeoutError)


def test_a_gke_call_to_a_black_hole_ends_at_its_timeout(black_hole: str) -> None:
    cluster = Cluster(project="p", location="us-central1", cluster="c", zone="us-central1-a")
    pools = gke.NodePools(cluster, gke.make_client(f"http://{black_hole}"), timeout=0.5)
    started = time.monotonic()

    error = outcome_of(lambda: pools.state(0, "pool"))

    # The REST transport's own read timeout, at the call's timeout, not a retry loop's deadline, nor an
    # error of some other kind (a refused connection would say "Connection refused").
    assert isinstance(error, requests.exceptions.ReadTimeout), repr(error)
    assert "read timeout=0.5" in str(error)
    assert time.monotonic() - started < 5 * 0.5
    # What the pass makes of it: GKE unavailable, asked again at the polling interval (not permanent).
    refusal = gke.classify_error(error)
    assert (refusal.reason, refusal.permanent) == (Reason.GKE_UNAVAILABLE, False)
    assert "Read timed out" in refusal.message
