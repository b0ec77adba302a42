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
    """GKE refuses an operation that conflicts with one running on the cluster. As GKE answers it: 400,
    FAILED_PRECONDITION, only a RequestInfo in the details, no ErrorInfo reason (rancher/gke-operator#509
    quotes the whole body; GoogleCloudPlatform/ai-on-gke's tpu-provisioner retries on this text)."""
    return GkeError(400, "FAILED_PRECONDITION", f"Cluster is running incompatible operation {operation}.")


def quota_refusal(resource: str, project: str) -> GkeError:
    """A create refused at once for quota (the synchronous path; the asynchronous one is a pool condition):
    403 PERMISSION_DENIED whose message is the only mark of quota. No public body carries an ErrorInfo
    reason (GoogleCloudPlatform/k8s-config-connector#321, kubeflow/kubeflow#842, kubeflow/examples#597,
    vanvalenlab/kiosk-console#367), so none is sent; the words are theirs."""
    return GkeError(
        403,
        "PERMISSION_DENIED",
        f'Insufficient regional quota to satisfy request: resource "{resource}": request requires '
        f"'1.0' and is short '1.0'. project has a quota of '0.0' with '0.0' available. View and manage "
        f"quotas at https://console.cloud.google.com/iam-admin/quotas?usage=USED&project={project}.",
    )


def too_many_operations(cluster: str, quota: int = 5) -> GkeError:
    """A sixth operation while five run on the cluster. As GKE answers it: 429 with these words and only a
    RequestInfo in the details (hashicorp/terraform-provider-google#15205 and #15579 quote the body: "Error
    429: Too many operations: cluster "clustername" hits the concurrent operations quota 5, please try again
    later. Details: [{"@type": "type.googleapis.com/google.rpc.RequestInfo", ...}]"). No ErrorInfo reason is
    sent, as none is in those bodies; the status of a 429 is RESOURCE_EXHAUSTED (google.rpc.Code)."""
    return GkeError(
        429,
        "RESOURCE_EXHAUSTED",
        f'Too many operations: cluster "{cluster}" hits the concurrent operations quota {quota}, '
        "please try again later.",
    )


def stockout_message(project: str, zone: str, instance: str, vms: int, waited: str) -> str:
    """The managed instance group's stockout as GKE relays it in the pool condition and the operation error
    (verbatim shape: tranquilitybase-io/tb-gcp#589, akka/akka-core#32992 "after 35m4.03s")."""
    return (
        f"Google Compute Engine: Not all instances running in IGM after {waited}. Expected {vms}, "
        f"running 0, transitioning {vms}. Current errors: [GCE_STOCKOUT]: Instance '{instance}' creation "
        f"failed: The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
        "fulfill the request.  Try a different zone, or try again later."
    )


def quota_message(resource: str, region: str, instance: str, vms: int, limit: int, waited: str) -> str:
    """The quota shortfall as GKE relays it in the pool condition (verbatim shape:
    GoogleCloudPlatform/k8s-config-connector#321, a `gcloud container node-pools describe`)."""
    return (
        f"Insufficient quota to satisfy the request: Not all instances running in IGM after {waited}. "
        f"Expected {vms}, running 0, transitioning {vms}. Current errors: [GCE_QUOTA_EXCEEDED]: Instance "
        f"'{instance}' creation failed: Quota '{resource}' exceeded.  Limit: {limit}.0 in region {region}."
    )
