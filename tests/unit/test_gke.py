"""GKE's answers as google-api-core raises them (built from GKE's REST error bodies), classified."""

from __future__ import annotations

import json

import pytest
import requests
from google.api_core import exceptions as gexc
from google.cloud import container_v1

from tpujob import gke, gke_cluster
from tpujob.api import constants as c
from tpujob.api.status import Reason
from tpujob.render import Cluster


def gke_error(code: int, status: str, message: str, reason: str = "") -> gexc.GoogleAPICallError:
    """What the REST transport raises for this google.rpc.Status body (google-api-core's own parser)."""
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason}] if reason else []
    response = requests.Response()
    response.status_code = code
    response._content = json.dumps(
        {"error": {"code": code, "message": message, "status": status, "details": details}}
    ).encode()
    response.request = requests.Request("POST", "https://container.googleapis.com/v1/x").prepare()
    return gexc.from_http_response(response)


AUTO_UPGRADE = "Auto_upgrade cannot be false when release_channel REGULAR is set."
BUSY = "Cluster is running incompatible operation operation-1-a."
# As GKE words them (gke.QUOTA_WORDS' sources): the message is the only mark, no ErrorInfo reason.
QUOTA = (
    "Insufficient regional quota to satisfy request: resource \"TPU_V5P\": request requires '16.0' and is "
    "short '16.0'. project has a quota of '0.0' with '0.0' available. View and manage quotas at "
    "https://console.cloud.google.com/iam-admin/quotas?usage=USED&project=p."
)
# A specific reservation too small (GoogleCloudPlatform/gsutil#1000) and missing (cluster-toolkit#5043).
RESERVATION_SHORT = (
    'Reservation does not have enough resources for the request: specific reservation "res" is insufficient '
    'for node pool "np" at zone "us-central1-c": required 1 and short of 1 VM count of machine type '
    "n2-standard-2."
)
RESERVATION_MISSING = (
    'Google Compute Engine: reservation "h4d-reservation/reservationBlocks/h4d-reservation-block-0001" not '
    'found for node pool "h4d-highmem-192-lssd-h4d-pool" at zone "us-central1-b".'
)
PROJECT_QUOTA = 'Insufficient project quota to satisfy request: resource "CPUS_ALL_REGIONS": request ...'
CLASSIFIED = {
    "invalid-argument": (gke_error(400, "INVALID_ARGUMENT", AUTO_UPGRADE), Reason.POOL_REJECTED, True),
    "incompatible-operation": (
        gke_error(400, "FAILED_PRECONDITION", BUSY),  # as GKE sends it: no ErrorInfo
        Reason.GKE_BUSY,
        False,
    ),
    "operation-in-progress": (  # GKE's other wording (hashicorp/terraform-provider-google#10366)
        gke_error(
            400,
            "FAILED_PRECONDITION",
            "Operation operation-1533161820212-e0451fc6 is currently creating a node pool for cluster c. "
            "Please wait and try again once it is done.",
        ),
        Reason.GKE_BUSY,
        False,
    ),
    # Any other FAILED_PRECONDITION is GKE refusing the request as it is: not "busy", not asked again at once
    # with the same request for ever.
    "failed-precondition": (
        gke_error(400, "FAILED_PRECONDITION", "The requested node pool configuration is not supported."),
        Reason.POOL_REJECTED,
        True,
    ),
    "quota": (gke_error(403, "PERMISSION_DENIED", QUOTA), Reason.QUOTA, True),
    "project-quota": (gke_error(403, "PERMISSION_DENIED", PROJECT_QUOTA), Reason.QUOTA, True),
    "permission": (gke_error(403, "PERMISSION_DENIED", "Required permission"), Reason.POOL_REJECTED, True),
    "not-found": (gke_error(404, "NOT_FOUND", "Not found: projects/p."), Reason.POOL_REJECTED, True),
    # A sixth operation on a cluster, as GKE answers it: 429, no ErrorInfo reason (terraform-provider-google
    # #15205, #15579): asked again at the next poll, never a failed job.
    "concurrent-operations": (
        gke_error(
            429,
            "RESOURCE_EXHAUSTED",
            'Too many operations: cluster "c" hits the concurrent operations quota 5, '
            "please try again later.",
        ),
        Reason.GKE_BUSY,
        False,
    ),
    "rate-limit": (
        gke_error(429, "RESOURCE_EXHAUSTED", "Too many operations", "RATE_LIMIT_EXCEEDED"),
        Reason.GKE_BUSY,
        False,
    ),
    "stockout": (
        gke_error(429, "RESOURCE_EXHAUSTED", "zone exhausted", "ZONE_RESOURCE_POOL_EXHAUSTED"),
        Reason.STOCKOUT,
        False,
    ),
    "reservation-short": (
        gke_error(429, "RESOURCE_EXHAUSTED", RESERVATION_SHORT),  # no ErrorInfo in the public text
        Reason.RESERVATION_EXHAUSTED,
        True,
    ),
    "reservation-missing": (
        gke_error(404, "NOT_FOUND", RESERVATION_MISSING),
        Reason.RESERVATION_NOT_FOUND,
        True,
    ),
    # Other 429s keep their classes: a rate limit (even one naming a reservation) and a reasonless one.
    "rate-limit-naming-a-reservation": (
        gke_error(
            429, "RESOURCE_EXHAUSTED", f"Too many operations. {RESERVATION_SHORT}", "RATE_LIMIT_EXCEEDED"
        ),
        Reason.GKE_BUSY,
        False,
    ),
    "too-many-operations": (
        gke_error(
            429,
            "RESOURCE_EXHAUSTED",
            'Too many operations: cluster "c" hits the concurrent operations quota 5, please try again '
            "later.",
        ),
        Reason.GKE_BUSY,
        False,
    ),
    # The reservation's words under another status are not a reservation refusal.
    "reservation-words-in-a-bad-request": (
        gke_error(400, "INVALID_ARGUMENT", RESERVATION_SHORT),
        Reason.POOL_REJECTED,
        True,
    ),
    "internal": (gke_error(500, "INTERNAL", "Internal error."), Reason.GKE_UNAVAILABLE, False),
    "unavailable": (gke_error(503, "UNAVAILABLE", "Unavailable."), Reason.GKE_UNAVAILABLE, False),
    "timeout": (TimeoutError("timed out"), Reason.GKE_UNAVAILABLE, False),
}


@pytest.mark.parametrize(("error", "reason", "permanent"), CLASSIFIED.values(), ids=CLASSIFIED.keys())
def test_refusals_are_classified_by_status_and_reason(error, reason, permanent):
    classified = gke.classify_error(error)
    assert (classified.reason, classified.permanent) == (reason, permanent)
    assert classified.message  # GKE's message, verbatim, for the status


def test_the_status_quotes_gke_without_the_clients_request_prefix():
    error = gke_error(403, "PERMISSION_DENIED", QUOTA)
    assert str(error.message).startswith("POST https://container.googleapis.com")  # what the client adds
    assert gke.classify_error(error).message == QUOTA


def test_words_alone_do_not_make_a_stockout():
    error = gke_error(400, "INVALID_ARGUMENT", "the zone does not have enough resources (lack of capacity)")
    assert gke.classify_error(error).reason == Reason.POOL_REJECTED


def cluster_resource(location: str, zones: list[str]) -> container_v1.Cluster:
    return container_v1.Cluster(name="c", location=location, locations=zones)


@pytest.mark.parametrize(
    ("zone", "fragment"),
    [
        ("us-central1-b", ""),
        ("us-central1", "TPUJOB_GKE_ZONE (chart value gke.zone) is 'us-central1', a region"),
        ("europe-west4-a", "not in the cluster's region us-central1"),
        ("", "is empty and the cluster"),
    ],
)
def test_the_zone_setting_is_checked_against_the_cluster(zone, fragment):
    cluster = Cluster(project="p", location="us-central1", cluster="c", zone=zone)
    regional = cluster_resource("us-central1", ["us-central1-a", "us-central1-b"])
    problem = gke_cluster.zone_problem(cluster, regional)
    if not fragment:
        assert problem == ""
    else:
        assert fragment in problem
    if zone == "us-central1":
        assert "us-central1-a, us-central1-b" in problem  # the fix: the cluster's zones


def test_a_zonal_cluster_accepts_its_own_zone():
    cluster = Cluster(project="p", location="us-central2-b", cluster="c", zone="us-central2-b")
    assert gke_cluster.zone_problem(cluster, cluster_resource("us-central2-b", ["us-central2-b"])) == ""


@pytest.mark.parametrize(
    ("location", "region"),
    [("us-central1", "us-central1"), ("us-central1-a", "us-central1"), ("us-central1-ai1a", "us-central1"),
     ("nowhere", None)],
)  # fmt: skip
def test_region_of(location, region):
    assert gke_cluster.region_of(location) == region


class _PoolAndOperation:
    """The two answers NodePools.state reads, as GKE returns them (real container_v1 types): a pool still
    showing a stockout, and its create operation."""

    def __init__(self, operation: container_v1.Operation) -> None:
        self.operation = operation

    def get_node_pool(self, name: str, timeout: float) -> container_v1.NodePool:
        condition = container_v1.StatusCondition(
            code=container_v1.StatusCondition.Code.GCE_STOCKOUT, message="no capacity"
        )
        return container_v1.NodePool(
            name="p", status=container_v1.NodePool.Status.ERROR, conditions=[condition]
        )

    def get_operation(self, name: str, timeout: float) -> container_v1.Operation:
        return self.operation

    def list_operations(self, parent: str, timeout: float) -> container_v1.ListOperationsResponse:
        return container_v1.ListOperationsResponse(operations=[])  # no newer create than the recorded one


DONE = container_v1.Operation.Status.DONE
RUNNING = container_v1.Operation.Status.RUNNING
GAVE_UP = container_v1.Operation(status=DONE, status_message="no capacity", error={"code": 8, "message": "x"})


@pytest.mark.parametrize(
    ("operation", "retrying"),
    [
        (container_v1.Operation(status=RUNNING), True),  # GKE retries the stockout
        (GAVE_UP, False),  # GKE gave up: the operator deletes and asks again
        # GKE got the VMs between the two reads: the pool read before it still showed the stockout. Not a
        # give-up (before, this read deleted a pool GKE had just made, and asked for it again).
        (container_v1.Operation(status=DONE), True),
    ],
)
def test_a_stocked_out_pool_is_given_up_only_by_an_operation_that_ended_in_error(operation, retrying):
    client = _PoolAndOperation(operation)
    pools = gke.NodePools(Cluster(), client)  # type: ignore[arg-type]
    assert pools.state(0, "p", "operation-1").retrying is retrying


def test_the_condition_with_the_cause_tells_whichever_comes_first():
    """GKE puts two conditions on a pool it could not make, the cause's code on one only."""
    plain = container_v1.StatusCondition(message="m", canonical_code=8)
    cause = container_v1.StatusCondition(
        code=container_v1.StatusCondition.Code.GCE_QUOTA_EXCEEDED, message="quota", canonical_code=8
    )
    assert gke.telling_condition([plain, cause]) is cause
    assert gke.telling_condition([cause, plain]) is cause
    assert gke.telling_condition([plain]) is plain
    assert gke.telling_condition([]) is None


class _LabelledPool:
    """A GKE client with one pool, labelled with a job's UID (or none); records deletes."""

    def __init__(self, labels: dict[str, str] | None) -> None:
        self.labels = labels
        self.deleted: list[str] = []

    def get_node_pool(self, name: str, timeout: float) -> container_v1.NodePool:
        if self.labels is None:
            raise gexc.NotFound("gone")
        return container_v1.NodePool(name=name.rsplit("/", 1)[-1], config={"labels": self.labels})

    def delete_node_pool(self, name: str, timeout: float) -> container_v1.Operation:
        self.deleted.append(name.rsplit("/", 1)[-1])
        return container_v1.Operation(name="operation-1")


@pytest.mark.parametrize(
    ("labels", "deleted"),
    [
        ({c.POOL_LABEL_JOB_UID: "uid-1"}, ["p"]),  # the job's own
        ({c.POOL_LABEL_JOB_UID: "uid-of-another-team"}, []),  # same name, another job's
        ({c.POOL_LABEL_MANAGED_BY: c.MANAGED_BY}, []),  # no UID label: no proof it is the job's
        ({}, []),
        (None, []),  # gone already
    ],
)
def test_a_pool_is_deleted_only_when_its_job_uid_label_is_the_jobs(labels, deleted):
    client = _LabelledPool(labels)
    assert gke.NodePools(Cluster(), client).delete("p", "uid-1") is None  # type: ignore[arg-type]
    assert client.deleted == deleted


# --- an operation read GKE refuses (403): the pass goes on, the status names the permission ------------

# GKE's words for a caller without the permission (google.rpc PERMISSION_DENIED over REST: a Forbidden).
DENIED = "Required 'container.operations.list' permission for 'projects/my-project/locations/us-central1-a'."


class _DeniedOperations(_PoolAndOperation):
    """A stocked-out pool whose operations GKE will not show: the role's one-cluster condition is not met by
    `projects/P/locations/L` (ListOperations) or `.../operations/O` (GetOperation)."""

    def get_operation(self, name: str, timeout: float) -> container_v1.Operation:
        raise gke_error(403, "PERMISSION_DENIED", DENIED.replace("list", "get"))

    def list_operations(self, parent: str, timeout: float) -> container_v1.ListOperationsResponse:
        raise gke_error(403, "PERMISSION_DENIED", DENIED)


def test_a_refused_operation_read_leaves_a_stocked_out_pool_waited_on_and_names_the_permission():
    view = gke.NodePools(Cluster(), _DeniedOperations(GAVE_UP)).state(0, "p", "operation-1")  # type: ignore[arg-type]
    assert view.retrying is None  # not known: waited on, never deleted on a guess
    assert "container.operations.get" in view.denied and "one-cluster IAM condition" in view.denied


def test_a_refused_operations_list_leaves_a_reconciling_pool_read_without_it():
    client = _DeniedOperations(GAVE_UP)
    client.get_node_pool = lambda name, timeout: container_v1.NodePool(  # type: ignore[method-assign]
        name="p", status=container_v1.NodePool.Status.RECONCILING
    )
    view = gke.NodePools(Cluster(), client).state(0, "p")  # type: ignore[arg-type]
    assert (view.state, view.disruption) == ("RECONCILING", "")
    assert "container.operations.list" in view.denied and DENIED in view.denied
