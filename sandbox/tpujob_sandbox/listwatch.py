"""A list, then a watch from the list's resourceVersion, kept in memory: what a simulated controller scans.

A real controller scans its informer's cache, not the API server: the cluster autoscaler's every
--scan-interval (10 s) reads its listers (client-go's reflector lists once, then watches from the list's
resourceVersion, and lists again when the watch fails or its history is gone: 410 Gone). A simulator that
listed on every scan instead, at the test bed's time scale (a scan every 0.25 s), cost a request through
kube-apiserver's aggregator to the CRD server each time, in every pytest worker for the whole session
(py-spy of the workers mid-run, 2026-11-29: the queued-provisioning scan was 13% of their samples).

Objects are the API server's JSON (dicts), keyed by namespace and name. While the resource is not served (its
CRD not installed: 404) the cache is empty and the list is tried again every `retry_seconds`."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# A watch ends after this long and is started again from where it was (client-go's reflector asks for a
# random 5-10 minutes; shorter here, so a stopped cache's thread ends soon).
WATCH_SECONDS = 30
# How long stop() waits for the thread to end once its watch is shut down.
STOP_SECONDS = 5


# While the resource is not served, the list is tried again later and later, up to this: client-go's reflector
# backs off likewise (reflector.go: an exponential backoff manager, 800 ms doubling to 30 s), shorter here so
# a CRD a test installs is seen within seconds. At 4 lists a second, each bed's caches of ProvisioningRequests
# (GKE's queued provisioning, with no CRD installed in most tests) were most of its idle API requests.
MAX_NOT_SERVED_RETRY_SECONDS = 2.0


def retry_after(retry_seconds: float, not_served: int) -> float:
    """How long to wait before the next list: `retry_seconds`, doubled for each 404 in a row past the first,
    up to MAX_NOT_SERVED_RETRY_SECONDS (never below `retry_seconds`)."""
    if not_served <= 1:
        return retry_seconds
    backed_off = retry_seconds * 2.0 ** (not_served - 1)
    return max(retry_seconds, min(backed_off, MAX_NOT_SERVED_RETRY_SECONDS))


def _key(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def json_list(
    api_client: k8s.ApiClient, path: str, query: Mapping[str, str] | None = None
) -> Callable[..., Any]:
    """A list call answering JSON for a path the custom objects API cannot name (a core resource, e.g.
    /api/v1/pods with a fieldSelector in `query`): the typed client's would build a model object per field.
    Called as the watch calls a list method (watch, resource_version, timeout_seconds, _preload_content)."""

    def call(**kwargs: Any) -> Any:
        params = dict(query or {})
        for keyword, param in (("watch", "watch"), ("resource_version", "resourceVersion"),
                               ("timeout_seconds", "timeoutSeconds")):  # fmt: skip
            if keyword in kwargs:
                value = kwargs[keyword]
                params[param] = str(value).lower() if isinstance(value, bool) else str(value)
        preload = kwargs.get("_preload_content", True)
        return api_client.call_api(
            path,
            "GET",
            query_params=list(params.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            response_type="object" if preload else None,
            _return_http_data_only=True,
            _preload_content=preload,
        )

    return call


def shut_down(response: urllib3.BaseHTTPResponse) -> None:
    """Wake a read blocked on the response's socket (the watch's stream then closes it); a response already
    closed has nothing to wake."""
    with contextlib.suppress(ValueError, OSError):
        response.shutdown()


class ListWatch:
    """`list_call(**kwargs)` (a typed client's list method answering JSON, e.g. CustomObjectsApi's
    list_cluster_custom_object with its group, version and plural bound) listed and watched on a thread."""

    def __init__(self, list_call: Callable[..., Any], *, name: str, retry_seconds: float) -> None:
        self._list_call = list_call
        self._name = name
        self._retry_seconds = retry_seconds
        self._items: dict[tuple[str, str], Obj] = {}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._watching: urllib3.BaseHTTPResponse | None = None  # the open watch's response, for stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"listwatch-{self._name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread and its open watch now. A watch left open holds kube-apiserver's graceful shutdown:
        a bed's stop waited out its 10 s grace for it (2026-11-30), at the end of every pytest worker."""
        self._stopped.set()
        with self._lock:
            if self._watching is not None:
                shut_down(self._watching)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=STOP_SECONDS)

    def items(self) -> list[Obj]:
        """The objects as the last list and the watch since have them (none while not served)."""
        with self._lock:
            return list(self._items.values())

    def _run(self) -> None:
        not_served = 0  # lists answered 404 in a row
        while not self._stopped.is_set():
            try:
                self._list_and_watch()
                not_served = 0
            except ApiException as error:
                if error.status == 404:  # not served (yet): nothing to scan
                    not_served += 1
                    with self._lock:
                        self._items.clear()
                else:  # 410 Gone included: the next round lists again
                    not_served = 0
                    log.debug("listwatch %s: %s %s; listing again", self._name, error.status, error.reason)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as error:  # a cut stream
                log.debug("listwatch %s: %s; listing again", self._name, error)
            self._stopped.wait(retry_after(self._retry_seconds, not_served))

    def _watch_call(self, **kwargs: Any) -> Any:
        """The list call, its streamed response kept where stop() can shut it down."""
        response = self._list_call(**kwargs)
        with self._lock:
            self._watching = response
            if self._stopped.is_set():  # stop() came between the check and the call
                shut_down(response)
        return response

    def _list_and_watch(self) -> None:
        listed = self._list_call()
        with self._lock:
            self._items = {_key(obj): obj for obj in listed.get("items") or []}
        version = listed["metadata"]["resourceVersion"]
        while not self._stopped.is_set():
            stream = k8s_watch.Watch().stream(
                self._watch_call, resource_version=version, timeout_seconds=WATCH_SECONDS
            )
            for event in stream:
                obj = event["object"]  # (an ERROR event is raised by the stream as an ApiException)
                version = obj["metadata"]["resourceVersion"]
                with self._lock:
                    if event["type"] == "DELETED":
                        self._items.pop(_key(obj), None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._items[_key(obj)] = obj
                if self._stopped.is_set():
                    return
