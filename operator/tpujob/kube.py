"""The Kubernetes calls a reconcile pass makes, through the `kubernetes` package, as plain dicts.

The login is kopf's own (`kopf.login_via_client`, registered in handlers/startup.py): the pod's
service account (its rotated token read again by the client every minute), else the kubeconfig,
exec credential plugins such as `gke-gcloud-auth-plugin` included. So the watches and the writes act
as one identity. Bodies go out as dicts and answers are not turned into models (`_preload_content`
off): a created pod's answer is not worth decoding, and the models would cost every pass. One pooled
set of connections, thread-safe: passes run in worker threads. Every request takes a token from the
operator's client-side limit first (tpujob.ratelimit), as a client-go controller's do, at the priority the
Kube method that makes it names (`_at`): the generated API classes pass no extra argument down to
`request`, so the priority travels in a context variable, set for the duration of the call.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from kubernetes import client, config

from tpujob import peering
from tpujob.api import constants as c
from tpujob.ratelimit import Priority, RequestLimiter

ApiError = client.ApiException
# (connect, read) seconds: the client sets a timeout only for an int or such a pair (a float is ignored,
# kubernetes/client/rest.py), so a dead connection would hang a pass thread for good.
Timeout = tuple[float, float]
DEFAULT_TIMEOUT: Timeout = (10.0, 60.0)

# The priority of the requests the current call makes (a context variable: each thread has its own).
_PRIORITY: contextvars.ContextVar[Priority] = contextvars.ContextVar(
    "tpujob_priority", default=Priority.STATUS
)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _at(priority: Priority) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Every request the decorated method makes waits for its token at `priority`."""

    def decorate(method: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(method)
        def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            token = _PRIORITY.set(priority)
            try:
                return method(*args, **kwargs)
            finally:
                _PRIORITY.reset(token)

        return call

    return decorate


class LimitedApiClient(client.ApiClient):  # type: ignore[misc]
    """The client's one door to the API server (every call of every API class goes through `request`),
    behind the limiter, with the connect and read timeouts."""

    def __init__(
        self,
        configuration: client.Configuration,
        limiter: RequestLimiter | None,
        timeout: Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(configuration)
        self.limiter = limiter
        self.timeout = timeout
        # Whether this replica may write (peering: only the active one); reads always may.
        self.may_write: Callable[[], bool] = lambda: True

    def request(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "GET" and not self.may_write():
            raise peering.NotLeading(f"{method} refused: this replica is not the active one")
        if self.limiter is not None:
            self.limiter.acquire(_PRIORITY.get())
        kwargs["_request_timeout"] = kwargs.get("_request_timeout") or self.timeout
        return super().request(method, *args, **kwargs)


def login(
    max_connections: int = 16, limiter: RequestLimiter | None = None, timeout: Timeout = DEFAULT_TIMEOUT
) -> client.ApiClient:
    """As kopf.login_via_client logs in: the service account in a pod, else the kubeconfig."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # KUBECONFIG as it is now (the client reads it once, when imported); a list of files is merged.
        config.load_kube_config(os.environ.get("KUBECONFIG") or config.KUBE_CONFIG_DEFAULT_LOCATION)
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = max_connections
    return LimitedApiClient(configuration, limiter, timeout)


def _read(response: Any) -> bytes:
    """A raw answer's body; the connection goes back to the pool, read to the end and reusable."""
    try:
        data: bytes = response.data
    finally:
        response.release_conn()
    return data


def _answer(response: Any) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(_read(response))
    return answer


class Kube:
    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def write_only_while(self, gate: Callable[[], bool]) -> None:
        """Every write (not the reads) raises peering.NotLeading while `gate()` is false."""
        assert isinstance(self.api_client, LimitedApiClient)
        self.api_client.may_write = gate

    @classmethod
    def login(
        cls,
        max_connections: int = 16,
        limiter: RequestLimiter | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
    ) -> Kube:
        return cls(login(max_connections, limiter, timeout))

    # --- pods, Services, Events ------------------------------------------------------------------

    @_at(Priority.WORKLOAD)
    def create_pod(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when the pod exists already."""
        return _created(self.core.create_namespaced_pod, namespace, body)

    @_at(Priority.WORKLOAD)
    def create_service(self, namespace: str, body: dict[str, Any]) -> bool:
        return _created(self.core.create_namespaced_service, namespace, body)

    @_at(Priority.EVENT)
    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        return _created(self.core.create_namespaced_event, namespace, body)

    @_at(Priority.WORKLOAD)  # frees TPUs for the next job
    def delete_pod(self, namespace: str, name: str) -> bool:
        """False when the pod is gone already."""
        return _deleted(lambda: self.core.delete_namespaced_pod(name, namespace, **_RAW))

    @_at(Priority.WORKLOAD)  # a pass' read
    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = _answer(self.core.list_node(label_selector=label_selector, **_RAW))[
            "items"
        ]
        return items

    def get_peering(
        self, name: str, namespace: str | None, timeout: Timeout | None = None
    ) -> dict[str, Any] | None:
        """kopf's peering object: a ClusterKopfPeering, or a KopfPeering in the namespace."""
        raw = {**_RAW, "_request_timeout": timeout} if timeout else _RAW
        try:
            if namespace is None:
                found = self.custom.get_cluster_custom_object(
                    peering.GROUP, peering.VERSION, peering.CLUSTER_PLURAL, name, **raw
                )
            else:
                found = self.custom.get_namespaced_custom_object(
                    peering.GROUP, peering.VERSION, namespace, peering.NAMESPACED_PLURAL, name, **raw
                )
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        return _answer(found)

    def create_peering(self, body: dict[str, Any]) -> bool:
        """kopf's peering object; False when it exists already (another replica made it)."""
        namespace = body["metadata"].get("namespace")
        try:
            if namespace is None:
                created = self.custom.create_cluster_custom_object(
                    peering.GROUP, peering.VERSION, peering.CLUSTER_PLURAL, body, **_RAW
                )
            else:
                created = self.custom.create_namespaced_custom_object(
                    peering.GROUP, peering.VERSION, namespace, peering.NAMESPACED_PLURAL, body, **_RAW
                )
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        _read(created)
        return True

    # --- TPUJobs ---------------------------------------------------------------------------------

    @_at(Priority.WORKLOAD)  # a pass' read before it creates
    def get_tpujob(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return _answer(self.custom.get_namespaced_custom_object(*_TPUJOBS(namespace), name, **_RAW))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list_tpujob_uids(self, namespace: str | None) -> set[str]:
        """The uids of the TPUJobs the API server has now (in `namespace`, or all), as metadata only: at
        10,000 jobs the specs and statuses would be megabytes for one set of names."""
        scope = f"/namespaces/{namespace}" if namespace else ""
        path = f"/apis/{c.GROUP}/{c.VERSION}{scope}/{c.PLURAL}"
        uids: set[str] = set()
        token = ""
        while True:
            query = [("limit", 500)] + ([("continue", token)] if token else [])
            response = self.custom.api_client.call_api(
                path,
                "GET",
                query_params=query,
                header_params={"Accept": METADATA_LIST},
                auth_settings=["BearerToken"],
                **_RAW,
            )
            page = _answer(response[0])
            uids.update(item["metadata"]["uid"] for item in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return uids

    @_at(Priority.WORKLOAD)  # the finalizer, before a pass creates its node pools
    def patch_tpujob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (a resourceVersion in it makes it conditional)."""
        return _answer(self.custom.patch_namespaced_custom_object(*_TPUJOBS(namespace), name, patch, **_RAW))

    @_at(Priority.STATUS)
    def patch_tpujob_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the status subresource: the spec is left as it is."""
        return _answer(
            self.custom.patch_namespaced_custom_object_status(*_TPUJOBS(namespace), name, patch, **_RAW)
        )

    def delete_tpujob(self, namespace: str, name: str, propagation: str = "Background") -> bool:
        return _deleted(
            lambda: self.custom.delete_namespaced_custom_object(
                *_TPUJOBS(namespace), name, propagation_policy=propagation, **_RAW
            )
        )


_RAW: dict[str, Any] = {"_preload_content": False}
# A list answered as PartialObjectMetadataList (Kubernetes 1.15 and later): names, uids, no bodies.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def _TPUJOBS(namespace: str) -> tuple[str, str, str, str]:
    return c.GROUP, c.VERSION, namespace, c.PLURAL


def _created(create: Callable[..., Any], namespace: str, body: dict[str, Any]) -> bool:
    try:
        _read(create(namespace, body, **_RAW))
    except ApiError as error:
        if error.status == 409:
            return False
        raise
    return True


def _deleted(delete: Callable[[], Any]) -> bool:
    try:
        _read(delete())
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True
