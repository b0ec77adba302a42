"""GETs decoded from JSON: of paths the typed client has no method for (discovery, a Table), and reads on a
simulator's hot path. The typed client builds a model object per nested field, and each builds a
Configuration that resets two loggers (logging's cache cleared for every logger the process has, hundreds
once TensorFlow is imported): py-spy of the pytest workers mid-run (2026-11-29) found a quarter of their
samples in that deserialization, half of it under the device plugin's and the kubelet's reads, which only
wanted the JSON back (sanitize_for_serialization).

Read as the typed client reads: the body inside urllib3's request, so a connection cut mid-body (the
aggregator aborting a proxied stream: IncompleteRead) is retried like one cut before the answer, by
urllib3's default Retry for idempotent methods, as client-go retries a GET on a probable EOF
(rest/request.go, IsProbableEOF). A response read lazily (`_preload_content=False`) is read outside any
retry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s


def get_json(
    api_client: k8s.ApiClient,
    path: str,
    accept: str = "application/json",
    query: Mapping[str, str] | None = None,
) -> Any:
    """The JSON at `path` (with `query`'s parameters); an ApiException for an error status, as the typed
    client raises."""
    return api_client.call_api(
        path,
        "GET",
        query_params=list((query or {}).items()),
        header_params={"Accept": accept},
        auth_settings=["BearerToken"],
        response_type="object",
        _return_http_data_only=True,
    )
