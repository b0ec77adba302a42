"""GETs of paths the typed client has no method for (discovery, a Table), decoded from JSON.

Read as the typed client reads: the body inside urllib3's request, so a connection cut mid-body (the
aggregator aborting a proxied stream: IncompleteRead) is retried like one cut before the answer, by
urllib3's default Retry for idempotent methods, as client-go retries a GET on a probable EOF
(rest/request.go, IsProbableEOF). A response read lazily (`_preload_content=False`) is read outside any
retry."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s


def get_json(api_client: k8s.ApiClient, path: str, accept: str = "application/json") -> Any:
    """The JSON at `path`; an ApiException for an error status, as the typed client raises."""
    return api_client.call_api(
        path,
        "GET",
        header_params={"Accept": accept},
        auth_settings=["BearerToken"],
        response_type="object",
        _return_http_data_only=True,
    )
