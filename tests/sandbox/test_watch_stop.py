"""A stopped simulator closes its watch's connection at once, not at the watch's timeout (30 s, 300 s).

A watch left open holds kube-apiserver's graceful shutdown: every test bed's stop waited out its 10 s grace
and killed the API server, at the end of every pytest worker and of every test that starts its own bed
(2026-11-30: the kubelet's pod watch was shut for reading but never closed; the autoscaler's cache of
pending pods was not shut at all). Seen from the kernel: the watch's socket leaves ESTABLISHED, i.e. this
end closed it and the API server got its FIN."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s

from tpujob_sandbox import wait_for
from tpujob_sandbox.kubelet.podwatch import PodWatch
from tpujob_sandbox.listwatch import ListWatch, json_list

# Well inside the watches' own timeouts, so only a stop that closes them passes.
CLOSED_WITHIN_SECONDS = 5
TCP_ESTABLISHED = "01"  # include/net/tcp_states.h, as /proc/net/tcp writes it


def established(connection: tuple[int, int]) -> bool:
    """Whether this machine has an established IPv4 TCP connection from local port to remote port
    (/proc/net/tcp). Both ports: once closed, the local one is soon another connection's, to another server
    (a busy suite reused one within the 5 s: 2026-11-30)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        ports = (int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16))
        if ports == connection and fields[3] == TCP_ESTABLISHED:
            return True
    return False


def ports_of(response: object) -> tuple[int, int]:
    """(local, remote) ports of a streamed urllib3 response's connection."""
    sock: socket.socket = response._connection.sock  # type: ignore[attr-defined]
    return sock.getsockname()[1], sock.getpeername()[1]


class Watcher:
    """A simulator's watch started on its own client: `response()` is its open watch, `stop()` ends it."""

    def __init__(self, response: Callable[[], object], stop: Callable[[], None]) -> None:
        self.response, self.stop = response, stop


def pending_pods_cache(core: k8s.CoreV1Api) -> Watcher:
    cache = ListWatch(
        json_list(core.api_client, "/api/v1/pods", {"fieldSelector": "status.phase=Pending"}),
        name="test-pending-pods",
        retry_seconds=0.1,
    )
    cache.start()
    return Watcher(lambda: cache._watching, cache.stop)


def kubelet_pod_watch(core: k8s.CoreV1Api) -> Watcher:
    watch = PodWatch(core, sync=lambda namespace, name: None)
    watch.start()
    return Watcher(lambda: watch._watch_response, watch.stop)


@pytest.mark.parametrize("start", [pending_pods_cache, kubelet_pod_watch])
def test_a_stopped_watcher_closes_its_watch_at_once(sandbox, namespace, start) -> None:
    core = k8s.CoreV1Api(k8s.ApiClient(sandbox.api_client.configuration))
    watcher = start(core)
    try:
        response = wait_for(watcher.response, timeout=30, what="the watch to open")
        connection = ports_of(response)
        assert established(connection)
        # An event through the watch, as the bed's watches have: a pod no node can take (Pending).
        pod = {"containers": [{"name": "c", "image": "i"}], "nodeSelector": {"no-such-node": "x"}}
        core.create_namespaced_pod(namespace, {"metadata": {"name": "p"}, "spec": pod})
    finally:
        watcher.stop()
    wait_for(
        lambda: not established(connection),
        timeout=CLOSED_WITHIN_SECONDS,
        interval=0.1,
        what=f"the watch's connection (ports {connection}) to be closed",
        last_state=lambda: [
            line for line in Path("/proc/net/tcp").read_text().splitlines() if f"{connection[0]:04X}" in line
        ],
    )
