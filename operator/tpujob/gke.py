"""GKE through `google-cloud-container` (and, for tpu7x workload policies, `google-cloud-compute`): the
operator's only GKE I/O.

Every call is short: create/delete return a long-running operation that is never waited on here; the
reconcile loop polls the pool (and, while GKE retries it, its create operation) on its next pass.

GKE's refusals are classified by what the API says, not by matching words: the HTTP code, the
`google.rpc.Status` name and the `ErrorInfo.reason` of the error body (google-api-core exposes them), and
a pool's `conditions[].code` for what fails after the create was accepted.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import container_v1

from tpujob import peering
from tpujob import status as s
from tpujob.api import constants as c
from tpujob.api.status import Reason
from tpujob.render import Cluster

log = logging.getLogger(__name__)

# Seconds per GKE call: a hung call must not stall a reconcile pass.
CALL_TIMEOUT = 30.0

# google.rpc.ErrorInfo reasons GKE gives (seen in its error bodies).
REASON_QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
REASON_RATE_LIMITED = "RATE_LIMIT_EXCEEDED"
STOCKOUT_REASONS = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "GCE_STOCKOUT", "STOCKOUT"})
# A create refused for quota is a 403 PERMISSION_DENIED marked only by its words, with no ErrorInfo reason
# in any public body ("Insufficient regional quota to satisfy request: resource ...":
# GoogleCloudPlatform/k8s-config-connector#321, kubeflow/kubeflow#842; "Insufficient project quota" for
# the all-regions quotas: kubeflow/examples#597). The words are the only signal GKE gives.
QUOTA_WORDS = re.compile(r"insufficient (regional|project) quota to satisfy request", re.IGNORECASE)
# A pool consuming a specific reservation, refused at once. Too small: 429 "Reservation does not have enough
# resources for the request: specific reservation "R" is insufficient for node pool "P" at zone "Z": required
# 1 and short of 1 VM count of machine type M." (GoogleCloudPlatform/gsutil#1000). Missing: 404 "Google
# Compute Engine: reservation "R" not found for node pool "P" at zone "Z"."
# (GoogleCloudPlatform/cluster-toolkit#5043). Neither body is known to carry an ErrorInfo reason: words again.
RESERVATION_SHORT_WORDS = re.compile(
    r"reservation does not have enough resources|specific reservation .* is insufficient for node pool",
    re.IGNORECASE,
)
RESERVATION_MISSING_WORDS = re.compile(r'reservation "[^"]*" not found for node pool', re.IGNORECASE)
# FAILED_PRECONDITION that means "another operation runs on the cluster: ask again once it is done", in
# GKE's two wordings: "Cluster is running incompatible operation operation-..." (ErrorInfo reason
# CLUSTER_ALREADY_HAS_OPERATION when present: kubernetes-sigs/cluster-api-provider-gcp#1363; rancher/
# gke-operator#509) and "Operation operation-... is currently creating a node pool for cluster C. Please wait
# and try again once it is done." (prometheus/test-infra#84; hashicorp/terraform-provider-google#10366). Any
# other FAILED_PRECONDITION is GKE saying the request cannot be met as it is: a refusal, not "busy".
REASON_CLUSTER_BUSY = "CLUSTER_ALREADY_HAS_OPERATION"
BUSY_WORDS = re.compile(
    r"running incompatible operation|is currently \w+ing .*please wait and try again", re.IGNORECASE
)
# A refusal of the pool's own upgrade exclusion (render/pools.py UPGRADE_SHIELD) names its field, as Google's
# API front end names any field it does not take ('Invalid JSON payload received. Unknown name
# "exclusionUntilEndOfSupport" at 'node_pool.maintenance_policy': Cannot find field.'). No GKE refusal of
# the field's value is known in public; a refusal that names neither the field nor its message is about
# something else, and is not asked again without the exclusion.
UPGRADE_SHIELD_WORDS = re.compile(r"exclusion_?until_?end_?of_?support|maintenance_?policy", re.IGNORECASE)


def refuses_upgrade_shield(error: s.GKEError) -> bool:
    """Whether GKE's permanent refusal of a pool is about its upgrade exclusion."""
    return error.reason == Reason.POOL_REJECTED and bool(UPGRADE_SHIELD_WORDS.search(error.message))


@dataclass(frozen=True)
class OwnedPool:
    name: str
    namespace: str
    job: str
    job_uid: str
    state: str


def _rpc_status(error: gexc.GoogleAPICallError) -> str:
    """The google.rpc.Status name of the error body (over REST the exception class follows the HTTP code
    only: FAILED_PRECONDITION and INVALID_ARGUMENT both arrive as BadRequest)."""
    response = getattr(error, "response", None)
    try:
        status = response.json()["error"]["status"] if response is not None else ""
    except (ValueError, KeyError, TypeError, AttributeError):
        status = ""
    if status:
        return str(status)
    code = getattr(error, "grpc_status_code", None)
    return code.name if code is not None else ""


def gke_message(error: Exception) -> str:
    """GKE's own words: the error body's message, without the client's `POST http://...: ` prefix."""
    response = getattr(error, "response", None)
    try:
        found = response.json()["error"]["message"] if response is not None else ""
    except (ValueError, KeyError, TypeError, AttributeError):
        found = ""
    return str(found or getattr(error, "message", None) or error)


def _reservation_refusal(status: str, message: str) -> Reason | None:
    """ReservationExhausted or ReservationNotFound for GKE's refusal of a pool's specific reservation."""
    if status == "RESOURCE_EXHAUSTED" and RESERVATION_SHORT_WORDS.search(message):
        return Reason.RESERVATION_EXHAUSTED
    if status == "NOT_FOUND" and RESERVATION_MISSING_WORDS.search(message):
        return Reason.RESERVATION_NOT_FOUND
    return None


def classify_error(error: Exception) -> s.GKEError:
    """GKE's refusal of a call -> the reason the status shows, and whether asking again can help."""
    message = gke_message(error)
    if not isinstance(error, gexc.GoogleAPICallError):
        return s.GKEError(Reason.GKE_UNAVAILABLE, message)  # timeouts, connection errors
    reason = getattr(error, "reason", None) or ""
    status = _rpc_status(error)
    if reason == REASON_QUOTA_EXCEEDED or (status == "PERMISSION_DENIED" and QUOTA_WORDS.search(message)):
        # Not soon: someone must raise the quota or free some (permanent: asked again with a backoff).
        return s.GKEError(Reason.QUOTA, message, permanent=True)
    if reason in STOCKOUT_REASONS:
        return s.GKEError(Reason.STOCKOUT, message)
    busy = status == "FAILED_PRECONDITION" and (reason == REASON_CLUSTER_BUSY or BUSY_WORDS.search(message))
    if reason == REASON_RATE_LIMITED or busy:
        return s.GKEError(Reason.GKE_BUSY, message)
    if (reservation := _reservation_refusal(status, message)) is not None:
        # Someone must enlarge or create the reservation (or change the spec): asked again with a backoff.
        return s.GKEError(reservation, message, permanent=True)
    if status == "RESOURCE_EXHAUSTED":  # 429 without a reason: GKE's rate limits
        return s.GKEError(Reason.GKE_BUSY, message)
    refusals = ("INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "PERMISSION_DENIED", "OUT_OF_RANGE")
    if status in (*refusals, "UNAUTHENTICATED"):
        # The request (or the cluster it names) is wrong: the same call fails until someone changes it.
        return s.GKEError(Reason.POOL_REJECTED, message, permanent=True)
    return s.GKEError(Reason.GKE_UNAVAILABLE, message)  # INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED ...


# --- the operator's Google identity -----------------------------------------------------------------

SETTING_IDENTITY = "TPUJOB_GKE_IDENTITY (chart value gke.identity, or serviceAccount.gcpServiceAccount)"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


class IdentityProblem(RuntimeError):
    """The operator's Google credentials are not the identity it was told to act as: it does not start."""


def credentials_identity(credentials: Credentials, request: Any) -> str:
    """Whom Google credentials act as: a key's or an impersonated account's email at once; the metadata
    server's account (a node's, or Workload Identity's) once asked (a refresh, which also proves they
    work)."""
    email = getattr(credentials, "service_account_email", None)
    if email in (None, "default"):
        credentials.refresh(request)  # type: ignore[no-untyped-call]
        email = getattr(credentials, "service_account_email", None)
    if not email or email == "default":
        raise IdentityProblem(
            f"cannot tell which Google identity the operator's credentials ({type(credentials).__name__}) "
            "act as: use Workload Identity or a service account key (GOOGLE_APPLICATION_CREDENTIALS)"
        )
    return str(email)


def checked_credentials(identity: str) -> Credentials:
    """Application Default Credentials, if they are `identity`; else IdentityProblem, saying what to set.

    Without this check the client takes whatever it finds, and on a GKE node without Workload Identity that
    is the node's own service account (the metadata server), which every pod of the node can use too: the
    operator would create node pools as an identity nobody gave it. So it acts only as the identity named."""
    if not identity:
        raise IdentityProblem(
            f"no Google identity is configured for GKE calls: set {SETTING_IDENTITY} to the Google service "
            "account the operator acts as (Workload Identity), or to PROJECT.svc.id.goog for Workload "
            "Identity Federation; the operator does not fall back to its node's service account"
        )
    import google.auth
    import google.auth.transport.requests

    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM])
        found = credentials_identity(credentials, google.auth.transport.requests.Request())
    except google.auth.exceptions.GoogleAuthError as error:
        raise IdentityProblem(f"no Google credentials for {identity}: {error}") from None
    if found != identity:
        raise IdentityProblem(
            f"the operator's Google credentials act as {found}, not {identity} ({SETTING_IDENTITY}): give "
            "the operator's Kubernetes ServiceAccount that Google identity (Workload Identity: its "
            "iam.gke.io/gcp-service-account annotation and a roles/iam.workloadIdentityUser binding), or "
            f"name {found} there if it is meant"
        )
    return credentials


def make_client(
    endpoint: str | None, credentials: Credentials | None = None
) -> container_v1.ClusterManagerClient:
    """The real client, as `credentials` (checked_credentials); with an endpoint (the sandbox's simulated
    GKE) over REST without credentials."""
    if endpoint:
        return container_v1.ClusterManagerClient(
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            transport="rest",
            client_options=ClientOptions(api_endpoint=endpoint),
        )
    return container_v1.ClusterManagerClient(credentials=credentials)


def _operation_time(value: str) -> dt.datetime | None:
    """An Operation's start_time or end_time (RFC 3339 text in container_v1), as a time; None when absent."""
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# --- node pools ----------------------------------------------------------------------------------------


def telling_condition(conditions: list[container_v1.StatusCondition]) -> container_v1.StatusCondition | None:
    """The condition that says why a pool failed: GKE puts two on a pool it could not make, only one with the
    (deprecated) `code` that names the cause (GCE_STOCKOUT, GCE_QUOTA_EXCEEDED), both with `canonicalCode`
    RESOURCE_EXHAUSTED, in no documented order: the one with a code, else the first."""
    with_code = [c for c in conditions if c.code]
    return with_code[0] if with_code else (conditions[0] if conditions else None)


class OperationsDenied(Exception):
    """GKE answered 403 to an operation read: the operator's role lacks the permission, or grants it under a
    one-cluster IAM condition, which GKE does not meet for operations (it checks them on the project and the
    operation). The pass goes on without the operation; the job's status carries `message`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NodePools:
    """Create, inspect and delete one cluster's node pools."""

    def __init__(
        self, cluster: Cluster, client: container_v1.ClusterManagerClient, timeout: float = CALL_TIMEOUT
    ) -> None:
        self.cluster = cluster
        self.client = client
        self.timeout = timeout  # seconds, per call (TPUJOB_GKE_TIMEOUT_SECONDS)
        # Whether this replica may call GKE (peering: only the active one).
        self.may_call: Callable[[], bool] = lambda: True

    def _guard(self) -> None:
        if not self.may_call():
            raise peering.NotLeading("GKE call refused: this replica is not the active one")

    def _path(self, name: str) -> str:
        return f"{self.cluster.parent}/nodePools/{name}"

    @property
    def _operations_parent(self) -> str:
        return f"projects/{self.cluster.project}/locations/{self.cluster.location}"

    def state(
        self, slice_index: int, name: str, operation: str = "", since: dt.datetime | None = None
    ) -> s.PoolView:
        """The pool as GKE has it. `since`: the current attempt's start, for a job whose slice was disrupted
        (status.recreation.workers_disrupted): GKE's operations list is read for an upgrade or a repair of
        the pool that runs, or ended since then, whatever the pool's status now (a repair may end before the
        operator looks). Otherwise the list is read only while the pool is RECONCILING, for the operation
        that runs."""
        self._guard()
        try:
            pool = self.client.get_node_pool(name=self._path(name), timeout=self.timeout)
        except gexc.NotFound:
            return s.PoolView(slice_index, name, s.POOL_MISSING)
        condition = telling_condition(list(pool.conditions))
        code = condition.code.name if condition is not None and condition.code else ""
        message = condition.message if condition is not None else pool.status_message
        zone = pool.locations[0] if pool.locations else ""
        uid = dict(pool.config.labels).get(c.POOL_LABEL_JOB_UID, "")
        view = s.PoolView(
            slice_index, name, pool.status.name, message, code, operation=operation, zone=zone, job_uid=uid
        )
        if pool.status == container_v1.NodePool.Status.RECONCILING or since is not None:
            # GKE works (or worked) on the pool: an update, an upgrade or a repair. The running one names
            # why a RECONCILING pool keeps the job waiting (status.pools); status.recreation decides from it
            # whether GKE's work is what disrupted the slice.
            try:
                kind, found, running = self._node_recreation(name, since)
            except OperationsDenied as denied:  # read as no operation: the status says what is missing
                kind, found, running = "", "", True
                view = dataclasses.replace(view, denied=denied.message)
            view = dataclasses.replace(
                view, disruption=kind, disruption_operation=found, disruption_running=running
            )
            if pool.status == container_v1.NodePool.Status.RECONCILING:
                return view
        if s.capacity_shortage(code) is not None:
            # GKE retries a stockout while the create operation runs; once it ends, GKE has given up. A
            # recorded operation that ended may belong to an earlier create of a pool by this name (the
            # operator re-requested it after GKE gave up, and died before recording the new one): the
            # pool's newest create operation decides.
            try:
                retrying = self._running(operation)
                if not retrying:
                    newest = self._create_operation(name)
                    if newest and newest != operation:
                        operation, retrying = newest, self._running(newest)
            except OperationsDenied as denied:
                # Not known whether GKE still retries: waited on as if it did (never deleted on a guess).
                return dataclasses.replace(view, retrying=None, operation=operation, denied=denied.message)
            return dataclasses.replace(view, retrying=retrying, operation=operation)
        return view

    def _denied(self, permission: str, error: gexc.Forbidden) -> OperationsDenied:
        return OperationsDenied(
            f"GKE refused {permission} on {self._operations_parent} ({gke_message(error)}): grant the "
            f"operator's Google service account {permission} without the one-cluster IAM condition (GKE "
            "checks it on the project and the operation, not the cluster)"
        )

    def _list_operations(self) -> container_v1.ListOperationsResponse:
        try:
            return self.client.list_operations(parent=self._operations_parent, timeout=self.timeout)
        except gexc.Forbidden as error:  # PermissionDenied is a Forbidden: 403 over REST or gRPC
            raise self._denied("container.operations.list", error) from error

    def _node_recreation(self, pool: str, since: dt.datetime | None = None) -> tuple[str, str, bool]:
        """GKE's operation on `pool`'s nodes (UPGRADE_NODES, AUTO_REPAIR_NODES) that runs, else the newest
        that ended at or after `since`: (its type, its name, whether it runs); ("", "", True) when none. A
        repair's target may be one node under the pool (`.../nodePools/P/node/N`: container_v1
        Operation.target_link)."""
        response = self._list_operations()
        pool_link = f"/clusters/{self.cluster.cluster}/nodePools/{pool}"
        ended: list[tuple[dt.datetime, str, str]] = []
        for op in response.operations:
            kind = op.operation_type.name
            on_pool = op.target_link.endswith(pool_link) or f"{pool_link}/node/" in op.target_link
            if not on_pool or not s.recreates_nodes(kind):
                continue
            if op.status != container_v1.Operation.Status.DONE:
                return kind, op.name, True
            end = _operation_time(op.end_time)
            if since is not None and end is not None and end >= since:
                ended.append((end, kind, op.name))
        if ended:
            _, kind, name = max(ended)
            return kind, name, False
        return "", "", True

    def _create_operation(self, pool: str) -> str:
        """The newest create operation of `pool` (after a restart the operator may not have recorded it)."""
        response = self._list_operations()
        creates = [
            op
            for op in response.operations
            if op.operation_type == container_v1.Operation.Type.CREATE_NODE_POOL
            and op.target_link.endswith(f"/nodePools/{pool}")
        ]
        return max(creates, key=lambda op: op.start_time).name if creates else ""

    def _running(self, operation: str) -> bool | None:
        """Whether GKE still works on the create: its operation runs, or ended without an error. An
        operation that succeeded has not given up: GKE got the VMs between our read of the pool (still
        showing the stockout) and this read, and the pool reads RUNNING at the next poll."""
        if not operation:
            return None
        try:
            found = self.client.get_operation(
                name=f"{self._operations_parent}/operations/{operation}", timeout=self.timeout
            )
        except gexc.NotFound:
            return False
        except gexc.Forbidden as error:
            raise self._denied("container.operations.get", error) from error
        if found.status != container_v1.Operation.Status.DONE:
            return True
        return not (found.error.code or found.status_message)

    def create(self, pool: dict[str, Any]) -> tuple[str, s.GKEError | None]:
        """Ask GKE for a pool (rendered REST JSON): (the operation's name, None) when accepted, ("", None)
        when it exists already, ("", the refusal) when refused."""
        self._guard()
        request = container_v1.NodePool.from_json(json.dumps(pool))
        try:
            operation = self.client.create_node_pool(
                parent=self.cluster.parent, node_pool=request, timeout=self.timeout
            )
        except gexc.AlreadyExists:
            return "", None
        except gexc.GoogleAPICallError as error:
            log.warning("create node pool %s: %s", pool["name"], error)
            return "", classify_error(error)
        log.info("node pool %s: create requested (%s)", pool["name"], operation.name)
        return operation.name, None

    def delete(self, name: str, job_uid: str) -> s.GKEError | None:
        """Start deleting a pool of the job whose UID is `job_uid`. None when accepted or already gone, or
        when the pool is not that job's: a name is no proof (its job-uid label is), and another job's pool
        is never deleted; it is left and said."""
        self._guard()
        try:
            found = self.client.get_node_pool(name=self._path(name), timeout=self.timeout)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as error:
            return classify_error(error)
        if (label := dict(found.config.labels).get(c.POOL_LABEL_JOB_UID, "")) != job_uid:
            log.warning(
                "node pool %s: not deleted: its %s label is %r, not the job's %s",
                name,
                c.POOL_LABEL_JOB_UID,
                label,
                job_uid,
            )
            return None
        try:
            self.client.delete_node_pool(name=self._path(name), timeout=self.timeout)
        except gexc.NotFound:
            return None
        except gexc.GoogleAPICallError as error:
            log.info("delete node pool %s: %s (will retry)", name, error)
            return classify_error(error)
        log.info("node pool %s: delete requested", name)
        return None

    def owned(self) -> list[OwnedPool]:
        """Pools labelled as made by this operator, to find the ones whose TPUJob is gone."""
        self._guard()
        response = self.client.list_node_pools(parent=self.cluster.parent, timeout=self.timeout)
        found = []
        for pool in response.node_pools:
            labels = dict(pool.config.labels)
            if labels.get(c.POOL_LABEL_MANAGED_BY) != c.MANAGED_BY:
                continue
            found.append(
                OwnedPool(
                    name=pool.name,
                    namespace=labels.get(c.POOL_LABEL_NAMESPACE, ""),
                    job=labels.get(c.POOL_LABEL_JOB, ""),
                    job_uid=labels.get(c.POOL_LABEL_JOB_UID, ""),
                    state=pool.status.name,
                )
            )
        return found


# --- tpu7x workload policies ---------------------------------------------------------------------------


class WorkloadPolicies:
    """Reads a workload policy's accelerator topology through the Compute API (google-cloud-compute).

    Imported on first use: its generated types cost about 130 MiB of memory and 2 s when loaded, which only
    operators running tpu7x jobs should pay. Answers are cached: a policy cannot be edited in place."""

    def __init__(
        self,
        project: str,
        region: str,
        endpoint: str | None,
        timeout: float = CALL_TIMEOUT,
        credentials: Credentials | None = None,
    ) -> None:
        self.project, self.region, self.endpoint = project, region, endpoint
        self.credentials = credentials
        self.timeout = timeout
        self.may_call: Callable[[], bool] = lambda: True  # as NodePools.may_call
        self._client: Any = None
        self._topologies: dict[str, str] = {}
        self._lock = threading.Lock()

    def _compute(self) -> Any:
        if self._client is None:
            from google.cloud.compute_v1.services.resource_policies import ResourcePoliciesClient

            if self.endpoint:
                self._client = ResourcePoliciesClient(
                    credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                    transport="rest",
                    client_options=ClientOptions(api_endpoint=self.endpoint),
                )
            else:
                self._client = ResourcePoliciesClient(credentials=self.credentials)
        return self._client

    def fact(self, name: str) -> s.PolicyFact:
        """Policy `name` as the Compute API describes it (status.placement judges whether it fits a job)."""
        if not self.may_call():
            raise peering.NotLeading("Compute call refused: this replica is not the active one")
        fact = s.PolicyFact(name, self.project, self.region)
        found = self._topologies.get(name)
        if found is None:
            try:
                # The lock guards the client's lazy import and creation only, not the call.
                with self._lock:
                    compute = self._compute()
                policy = compute.get(
                    project=self.project, region=self.region, resource_policy=name, timeout=self.timeout
                )
            except gexc.NotFound:
                return fact
            except gexc.GoogleAPICallError as error:
                return dataclasses.replace(fact, error=classify_error(error))
            found = self._topologies[name] = policy.workload_policy.accelerator_topology
        return dataclasses.replace(fact, topology=found)
