"""GKE's refusals as the client receives them: an HTTP code, a `google.rpc.Status` body and GKE's wording.

Over REST, `google-api-core` picks the exception class from the HTTP code (400 -> BadRequest, 403 ->
Forbidden, 404 -> NotFound, 409 -> Conflict, 429 -> TooManyRequests, 5xx -> ServerError) and exposes the
`status` name and the `ErrorInfo.reason` of the body, so the operator can classify without reading words.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

# google.rpc.Code numbers, as they appear in Operation.error.code and StatusCondition.canonicalCode.
CANCELLED = 1
INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
INTERNAL = 13


@dataclass
class GkeError(Exception):
    http_status: int
    status: str  # google.rpc.Code name
    message: str
    reason: str = ""  # google.rpc.ErrorInfo.reason, when GKE gives one

    def body(self) -> dict[str, Any]:
        details: list[dict[str, Any]] = []
        if self.reason:
            details.append(
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": self.reason,
                    "domain": "container.googleapis.com",
                }
            )
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RequestInfo", "requestId": f"0x{secrets.token_hex(8)}"}
        )
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "status": self.status,
                "details": details,
            }
        }


def invalid_argument(message: str) -> GkeError:
    return GkeError(400, "INVALID_ARGUMENT", message)


def not_found(resource: str) -> GkeError:
    # Shape of GKE's 404s, e.g. "Not found: projects/p/locations/l/clusters/c." (google-cloud-python and
    # terraform-provider-google issues quote it so).
    return GkeError(404, "NOT_FOUND", f"Not found: {resource}.")


def new_operation_name() -> str:
    """GKE's operation ids: operation-<epoch ms>-<8 hex>."""
    return f"operation-{int(time.time() * 1000)}-{secrets.token_hex(4)}"


def incompatible_operation(operation: str) -> GkeError:
    """GKE runs one node pool operation at a time per cluster (and never a delete under a running create).
    Wording and code as real GKE answers, e.g. hashicorp/terraform-provider-google#9282 and
    GoogleCloudPlatform/ai-on-gke tpu-provisioner (which retries on "incompatible operation")."""
    return GkeError(
        400,
        "FAILED_PRECONDITION",
        f"Cluster is running incompatible operation {operation}.",
        "CLUSTER_ALREADY_HAS_OPERATION",
    )


def quota_refusal(resource: str, region: str) -> GkeError:
    """A create refused at once for quota (the synchronous path; the asynchronous one is a pool condition)."""
    return GkeError(
        403,
        "PERMISSION_DENIED",
        f'Insufficient regional quota to satisfy request: resource "{resource}": request requires '
        f"'1.0' and is short '1.0'. project has a quota of '0.0' with '0.0' available in region {region}. "
        "View and manage quotas at https://console.cloud.google.com/iam-admin/quotas.",
        "QUOTA_EXCEEDED",
    )


def too_many_operations(cluster: str) -> GkeError:
    return GkeError(
        429,
        "RESOURCE_EXHAUSTED",
        f'Too many operations: cluster "{cluster}" hits the concurrent operations quota 5, '
        "please try again later.",
        "RATE_LIMIT_EXCEEDED",
    )


def stockout_message(project: str, zone: str) -> str:
    """The IGM's stockout error as GKE relays it in a pool condition and the operation error
    (GCE's ZONE_RESOURCE_POOL_EXHAUSTED / GCE_STOCKOUT wording, e.g. GoogleCloudPlatform/ai-on-gke issues)."""
    return (
        "Google Compute Engine: Not all instances running in IGM after 35m0s. "
        "Current errors: [GCE_STOCKOUT]: "
        f"Instance creation failed: The zone 'projects/{project}/zones/{zone}' does not have enough "
        "resources available to fulfill the request. Try a different zone, or try again later."
    )


def quota_message(resource: str, region: str, needed: int, available: int) -> str:
    """The IGM's quota error as GKE relays it in a pool condition (GCE_QUOTA_EXCEEDED)."""
    return (
        "Google Compute Engine: Not all instances running in IGM. Current errors: [GCE_QUOTA_EXCEEDED]: "
        f"Instance creation failed: Quota '{resource}' exceeded. Limit: {available}.0 in region {region}. "
        f"Requested {needed}.0."
    )
