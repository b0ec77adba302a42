"""The few Kubernetes calls a reconcile pass makes: create, delete, merge-patch, get, as plain JSON.

Not the `kubernetes` package: importing its generated models costs the operator about 40 MiB, a
quarter of its memory budget, for calls whose answers it hardly reads. Credentials come from kopf's
own login (the pod's service account, else the kubeconfig), so the watches and the writes act as one
identity. Synchronous, thread-safe (one pooled set of connections): passes run in worker threads.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import quote

import kopf
import urllib3

from tpujob.api import constants as c

# A projected service account token is rotated by the kubelet: read the file again this often.
TOKEN_REREAD_SECONDS = 60.0
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer: the HTTP status and the API server's reason (NotFound, AlreadyExists, ...)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason


def pods(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods" + (f"/{quote(name)}" if name else "")


def services(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/services" + (f"/{quote(name)}" if name else "")


def events(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/events"


def nodes(label_selector: str) -> str:
    return f"/api/v1/nodes?labelSelector={quote(label_selector)}"


def tpujobs(namespace: str, name: str = "", subresource: str = "") -> str:
    path = f"/apis/{c.GROUP}/{c.VERSION}/namespaces/{quote(namespace)}/{c.PLURAL}"
    return path + (f"/{quote(name)}" if name else "") + (f"/{subresource}" if subresource else "")


class Kube:
    def __init__(
        self,
        connection: kopf.ConnectionInfo,
        token_path: str | None = None,
        max_connections: int = 16,
        timeout: float = 60.0,
    ) -> None:
        self.server = connection.server.rstrip("/")
        self._token = connection.token
        self._token_path = token_path
        self._token_read = time.monotonic()
        self._token_lock = threading.Lock()
        self._basic = (
            urllib3.make_headers(basic_auth=f"{connection.username}:{connection.password}")
            if connection.username and connection.password
            else {}
        )
        insecure = bool(connection.insecure)
        self._http = urllib3.PoolManager(
            num_pools=1,
            maxsize=max_connections,
            block=True,
            ssl_context=connection.as_ssl_context() if self.server.startswith("https") else None,
            cert_reqs="CERT_NONE" if insecure else "CERT_REQUIRED",
            assert_hostname=False if insecure else None,
            timeout=urllib3.Timeout(connect=10.0, read=timeout),
            retries=False,
        )

    @classmethod
    def login(cls, settings: kopf.OperatorSettings) -> Kube:
        """As kopf logs in without a client library: the service account in a pod, else the kubeconfig."""
        connection = kopf.login_with_service_account(settings=settings)
        if connection is not None:
            return cls(connection, token_path=SERVICE_ACCOUNT_TOKEN)
        connection = kopf.login_with_kubeconfig(settings=settings)
        if connection is None:
            raise kopf.LoginError("no service account token and no kubeconfig (KUBECONFIG, ~/.kube/config)")
        return cls(connection)

    # --- the calls -------------------------------------------------------------------------------

    def create(self, path: str, body: dict[str, Any]) -> bool:
        """POST; False when the object exists already."""
        try:
            self.request("POST", path, body)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True

    def delete(self, path: str, propagation: str | None = None) -> bool:
        """DELETE; False when the object is gone already."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.request("DELETE", path, body if propagation else None)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, patch, content_type=MERGE_PATCH, answer=True)

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path, answer=True)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = JSON,
        answer: bool = False,
    ) -> dict[str, Any]:
        """One call; the answer is parsed only when asked for (a created pod is not worth decoding)."""
        payload = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            headers = {"Accept": JSON, **self._basic, **self._authorization()}
            if payload is not None:
                headers["Content-Type"] = content_type
            response = self._http.request(method, self.server + path, body=payload, headers=headers)
            if response.status == 401 and attempt == 0 and self._token_path:
                self._reread_token()  # rotated between two reads: once more with the new token
                continue
            break
        if response.status >= 300:
            raise _error(response.status, response.data)
        return json.loads(response.data) if answer else {}

    def close(self) -> None:
        self._http.clear()

    # --- credentials ----------------------------------------------------------------------------

    def _authorization(self) -> dict[str, str]:
        if self._token_path and time.monotonic() - self._token_read > TOKEN_REREAD_SECONDS:
            self._reread_token()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _reread_token(self) -> None:
        assert self._token_path is not None
        with self._token_lock:
            with open(self._token_path, encoding="utf-8") as file:
                self._token = file.read().strip()
            self._token_read = time.monotonic()


def _error(status: int, data: bytes) -> ApiError:
    try:
        answer = json.loads(data)
        return ApiError(status, answer.get("reason", ""), answer.get("message", ""))
    except (ValueError, AttributeError):
        return ApiError(status, "", data[:200].decode(errors="replace"))
