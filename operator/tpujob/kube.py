"""The Kubernetes calls a reconcile pass makes, as plain JSON over one pooled HTTP client (httpx, built by
lightkube from the operator's login, tpujob.kubelogin: kopf's watches act as the same identity).

Bodies go out as dicts and answers come back as dicts, never models: a created pod's answer is not worth
decoding, and models would cost every pass (the `kubernetes` package's 800 model modules alone were 42 MiB
of the operator's memory). One client, thread-safe, pooled: passes run in worker threads. Every request
takes a token from the operator's client-side limit first (tpujob.ratelimit), as a client-go controller's
do, at the priority the Kube method that makes it names; while peering says this replica is not the
active one, every write raises peering.NotLeading before it is sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User

from tpujob import kubelogin, peering
from tpujob.api import constants as c
from tpujob.ratelimit import Priority, RequestLimiter

# (connect, read) seconds; the read timeout also bounds a write and a wait for a pooled connection.
Timeout = tuple[float, float]
DEFAULT_TIMEOUT: Timeout = (10.0, 60.0)
# How long an idle connection is kept for the next request: client-go's (its transport's IdleConnTimeout,
# Go's http.DefaultTransport), so a resync every 30 s reuses its connections instead of new TLS handshakes.
KEEPALIVE_SECONDS = 90.0
# A list answered as PartialObjectMetadataList (Kubernetes 1.15 and later): names, uids, no bodies.
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """The API server's refusal: the HTTP status, its reason phrase, and the body (a Status object)."""

    def __init__(self, status: int, reason: str = "", body: bytes = b"") -> None:
        self.status, self.reason, self.body = status, reason, body
        super().__init__(f"({status}) {reason}: {_message(body)}" if body else f"({status}) {reason}")


def _message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message") or body[:500].decode(errors="replace"))
    except (ValueError, AttributeError):
        return body[:500].decode(errors="replace")


def http_client(
    config: SingleConfig, max_connections: int = 16, timeout: Timeout = DEFAULT_TIMEOUT
) -> httpx.Client:
    """A client of `config`'s API server as `config`'s user. It keeps up to `max_connections` idle for
    reuse; a thread that finds none idle opens one rather than wait (as the `kubernetes` package's pool
    did), so no pass waits on the pool."""
    return httpx.Client(
        base_url=config.cluster.server,
        verify=client_adapter.verify_cluster(config.cluster, config.user or User(), config.abs_file),
        auth=kubelogin.client_auth(config),
        timeout=httpx.Timeout(timeout[1], connect=timeout[0]),
        limits=httpx.Limits(
            max_connections=None,
            max_keepalive_connections=max_connections,
            keepalive_expiry=KEEPALIVE_SECONDS,
        ),
    )


def login(max_connections: int = 16, timeout: Timeout = DEFAULT_TIMEOUT) -> httpx.Client:
    """As kopf logs in (tpujob.kubelogin): the service account in a pod, else the kubeconfig."""
    return http_client(kubelogin.load(), max_connections, timeout)


class Kube:
    def __init__(self, http: httpx.Client, limiter: RequestLimiter | None = None) -> None:
        self.http = http
        self.limiter = limiter
        # Whether this replica may write (peering: only the active one); reads always may.
        self.may_write: Callable[[], bool] = lambda: True

    @classmethod
    def login(
        cls,
        max_connections: int = 16,
        limiter: RequestLimiter | None = None,
        timeout: Timeout = DEFAULT_TIMEOUT,
    ) -> Kube:
        return cls(login(max_connections, timeout), limiter)

    def write_only_while(self, gate: Callable[[], bool]) -> None:
        """Every write (not the reads) raises peering.NotLeading while `gate()` is false."""
        self.may_write = gate

    def _call(
        self,
        method: str,
        path: str,
        priority: Priority,
        *,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        params: dict[str, str | int] | None = None,
        accept: str = "application/json",
        timeout: Timeout | None = None,
        gated: bool = True,
    ) -> bytes:
        """The one door to the API server: the write gate (not for `gated=False`: a review, which writes
        nothing), a token at `priority`, the request; the answer's body, or ApiError for a refusal."""
        if gated and method != "GET" and not self.may_write():
            raise peering.NotLeading(f"{method} refused: this replica is not the active one")
        if self.limiter is not None:
            self.limiter.acquire(priority)
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        response = self.http.request(
            method,
            path,
            content=json.dumps(body).encode() if body is not None else None,
            params=params,
            headers=headers,
            timeout=httpx.Timeout(timeout[1], connect=timeout[0]) if timeout else httpx.USE_CLIENT_DEFAULT,
        )
        if response.is_error:
            raise ApiError(response.status_code, response.reason_phrase, response.content)
        return response.content

    def _json(self, method: str, path: str, priority: Priority, **kwargs: Any) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self._call(method, path, priority, **kwargs))
        return answer

    # --- pods, Services, Events ------------------------------------------------------------------

    def create_pod(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when the pod exists already."""
        return self._created(f"/api/v1/namespaces/{namespace}/pods", body, Priority.WORKLOAD)

    def create_service(self, namespace: str, body: dict[str, Any]) -> bool:
        # After every waiting pod: its workers need it only once they run (reconciler/behind.py).
        return self._created(f"/api/v1/namespaces/{namespace}/services", body, Priority.STATUS)

    def create_network_policy(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when it exists already (made for an earlier job, by an operator process before this one)."""
        path = f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies"
        return self._created(path, body, Priority.WORKLOAD)

    def create_config_map(self, namespace: str, body: dict[str, Any]) -> bool:
        """False when one of its name exists already."""
        return self._created(f"/api/v1/namespaces/{namespace}/configmaps", body, Priority.WORKLOAD)

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    def patch_config_map(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._call(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/configmaps/{name}",
            Priority.WORKLOAD,
            body=patch,
            content_type="application/merge-patch+json",
        )

    def create_event(self, namespace: str, body: dict[str, Any]) -> bool:
        return self._created(f"/api/v1/namespaces/{namespace}/events", body, Priority.EVENT)

    def delete_pod(self, namespace: str, name: str) -> bool:
        """False when the pod is gone already. WORKLOAD: it frees TPUs for the next job."""
        return self._deleted(f"/api/v1/namespaces/{namespace}/pods/{name}", Priority.WORKLOAD)

    # --- reviews (authenticated /metrics, tpujob.metrics_auth) --------------------------------------------

    def review_token(self, token: str) -> dict[str, Any]:
        """A TokenReview's status: whether the API server authenticates `token`, and as whom. Every replica
        answers /metrics, a standby too: reviews write nothing, so the write gate does not hold them. EVENT:
        a caller of /metrics never goes before a pass' request (metrics_auth bounds how many it asks)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        path = "/apis/authentication.k8s.io/v1/tokenreviews"
        answer = self._json("POST", path, Priority.EVENT, body=body, gated=False)
        status: dict[str, Any] = answer.get("status") or {}
        return status

    def review_access(self, user: dict[str, Any], verb: str, path: str) -> dict[str, Any]:
        """A SubjectAccessReview's status: whether `user` (a TokenReview's status.user) may `verb` `path`."""
        spec: dict[str, Any] = {
            "user": user.get("username", ""),
            "groups": user.get("groups") or [],
            "uid": user.get("uid", ""),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.get("extra"):
            spec["extra"] = user["extra"]
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        path_ = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
        answer = self._json("POST", path_, Priority.EVENT, body=body, gated=False)
        status: dict[str, Any] = answer.get("status") or {}
        return status

    def list_pod_events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        """The Events about one pod (a field selector on involvedObject). WORKLOAD: a pass' read."""
        selector = f"involvedObject.kind=Pod,involvedObject.name={pod}"
        path = f"/api/v1/namespaces/{namespace}/events"
        answer = self._json("GET", path, Priority.WORKLOAD, params={"fieldSelector": selector})
        return list(answer.get("items") or [])

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> bool:
        """A JSON merge patch of the pod's annotations; False when the pod is gone. WORKLOAD: it restarts a
        kept worker's trainer in place."""
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            self._json(
                "PATCH",
                path,
                Priority.WORKLOAD,
                body={"metadata": {"annotations": annotations}},
                content_type=MERGE_PATCH,
            )
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        """WORKLOAD: a pass' read."""
        answer = self._json(
            "GET", "/api/v1/nodes", Priority.WORKLOAD, params={"labelSelector": label_selector}
        )
        items: list[dict[str, Any]] = answer["items"]
        return items

    def get_peering(
        self, name: str, namespace: str | None, timeout: Timeout | None = None
    ) -> dict[str, Any] | None:
        """kopf's peering object: a ClusterKopfPeering, or a KopfPeering in the namespace."""
        try:
            return self._json("GET", f"{_peerings(namespace)}/{name}", Priority.STATUS, timeout=timeout)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def create_peering(self, body: dict[str, Any]) -> bool:
        """kopf's peering object; False when it exists already (another replica made it)."""
        return self._created(_peerings(body["metadata"].get("namespace")), body, Priority.STATUS)

    # --- TPUJobs ---------------------------------------------------------------------------------

    def get_tpujob(self, namespace: str, name: str) -> dict[str, Any] | None:
        """WORKLOAD: a pass' read before it creates."""
        try:
            return self._json("GET", f"{_tpujobs(namespace)}/{name}", Priority.WORKLOAD)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list_tpujob_uids(self, namespace: str | None) -> set[str]:
        """The uids of the TPUJobs the API server has now (in `namespace`, or all), as metadata only: at
        10,000 jobs the specs and statuses would be megabytes for one set of names."""
        uids: set[str] = set()
        token = ""
        while True:
            params: dict[str, str | int] = {"limit": 500, **({"continue": token} if token else {})}
            page = self._json(
                "GET", _tpujobs(namespace), Priority.STATUS, params=params, accept=METADATA_LIST
            )
            uids.update(item["metadata"]["uid"] for item in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return uids

    def patch_tpujob(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (a resourceVersion in it makes it conditional). WORKLOAD: the finalizer,
        before a pass creates its node pools."""
        path = f"{_tpujobs(namespace)}/{name}"
        return self._json("PATCH", path, Priority.WORKLOAD, body=patch, content_type=MERGE_PATCH)

    def patch_tpujob_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the status subresource: the spec is left as it is."""
        path = f"{_tpujobs(namespace)}/{name}/status"
        return self._json("PATCH", path, Priority.STATUS, body=patch, content_type=MERGE_PATCH)

    def delete_tpujob(self, namespace: str, name: str, propagation: str = "Background") -> bool:
        path = f"{_tpujobs(namespace)}/{name}"
        return self._deleted(path, Priority.STATUS, params={"propagationPolicy": propagation})

    # --- Kueue (kueue.x-k8s.io, in the version its Workload API is served: reconciler/kueue.py) ----------

    def create_workload(self, namespace: str, version: str, body: dict[str, Any]) -> bool:
        """False when it exists already (its name is the job's: jobframework's)."""
        return self._created(_kueue(version, namespace, "workloads"), body, Priority.WORKLOAD)

    def patch_workload(
        self, namespace: str, version: str, name: str, patch: dict[str, Any], status: bool = False
    ) -> str:
        """A JSON merge patch of the Workload (its finalizers, spec.active) or of its status subresource; a
        resourceVersion in it makes it conditional (409 when Kueue wrote in between: the next pass reads
        again). The resourceVersion it wrote."""
        path = f"{_kueue(version, namespace, 'workloads')}/{name}{'/status' if status else ''}"
        answer = self._json("PATCH", path, Priority.WORKLOAD, body=patch, content_type=MERGE_PATCH)
        return str(answer["metadata"]["resourceVersion"])

    def delete_workload(self, namespace: str, version: str, name: str) -> bool:
        return self._deleted(f"{_kueue(version, namespace, 'workloads')}/{name}", Priority.STATUS)

    def get_kueue_object(
        self, version: str, plural: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        """A ResourceFlavor, LocalQueue or WorkloadPriorityClass; None when there is none of that name."""
        return self._get_or_none(f"{_kueue(version, namespace, plural)}/{name}")

    def get_pending_workloads(self, group: str, version: str, cluster_queue: str) -> dict[str, Any] | None:
        """Kueue's visibility API: a ClusterQueue's pending workloads (PendingWorkloadsSummary, Kueue's
        default limit of 1000); None when there is no such ClusterQueue."""
        return self._get_or_none(f"/apis/{group}/{version}/clusterqueues/{cluster_queue}/pendingworkloads")

    def get_api_group(self, group: str) -> dict[str, Any] | None:
        """Discovery: the group's APIGroup (its served versions, the preferred one); None when not served."""
        return self._get_or_none(f"/apis/{group}")

    def get_crd(self, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def get_priority_class(self, name: str) -> dict[str, Any] | None:
        return self._get_or_none(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")

    def list_priority_classes(self) -> list[dict[str, Any]]:
        answer = self._json("GET", "/apis/scheduling.k8s.io/v1/priorityclasses", Priority.WORKLOAD)
        items: list[dict[str, Any]] = answer.get("items") or []
        return items

    def _get_or_none(self, path: str) -> dict[str, Any] | None:
        """WORKLOAD: a pass' read."""
        try:
            return self._json("GET", path, Priority.WORKLOAD)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    # ---------------------------------------------------------------------------------------------

    def _created(self, path: str, body: dict[str, Any], priority: Priority) -> bool:
        """False when it exists already."""
        return self._done_unless(409, "POST", path, priority, body=body)

    def _deleted(self, path: str, priority: Priority, params: dict[str, str | int] | None = None) -> bool:
        """False when it is gone already."""
        return self._done_unless(404, "DELETE", path, priority, params=params)

    def _done_unless(self, already: int, method: str, path: str, priority: Priority, **request: Any) -> bool:
        """The request made; False when the API server answers `already` (the state is there)."""
        try:
            self._call(method, path, priority, **request)
        except ApiError as error:
            if error.status == already:
                return False
            raise
        return True


def _tpujobs(namespace: str | None) -> str:
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{c.GROUP}/{c.VERSION}{scope}/{c.PLURAL}"


def _kueue(version: str, namespace: str | None, plural: str) -> str:
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{c.KUEUE_GROUP}/{version}{scope}/{plural}"


def _peerings(namespace: str | None) -> str:
    if namespace is None:
        return f"/apis/{peering.GROUP}/{peering.VERSION}/{peering.CLUSTER_PLURAL}"
    return f"/apis/{peering.GROUP}/{peering.VERSION}/namespaces/{namespace}/{peering.NAMESPACED_PLURAL}"
