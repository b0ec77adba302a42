"""GKE's node pool condition codes, read once: the reason each gives, and the status and the metrics giving
the same reason for the same pool."""

import datetime as dt

import pytest
from google.cloud import container_v1
from prometheus_client import REGISTRY

from tests.manifests import base_job
from tpujob import metrics
from tpujob import status as s
from tpujob.api import parse_tpujob
from tpujob.api.status import NodePoolStatus, Reason, TPUJobStatus
from tpujob.render import naming

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
CAPACITY = {"GCE_STOCKOUT": Reason.STOCKOUT, "GCE_QUOTA_EXCEEDED": Reason.QUOTA}
# Every code the GKE client knows, none (a pool in ERROR with no condition), and one it does not know yet.
CODES = [*(code.name for code in container_v1.StatusCondition.Code), "", None, "SOME_FUTURE_CODE"]


@pytest.mark.parametrize("code", CODES)
def test_only_stockout_and_quota_codes_are_a_capacity_shortage(code):
    assert s.capacity_shortage(code) == CAPACITY.get(code or "")


@pytest.mark.parametrize("code", CODES)
def test_a_pool_in_error_is_short_of_capacity_or_quota_else_lost(code):
    assert s.pool_error_reason(code) == CAPACITY.get(code or "", Reason.POOL_LOST)


def gke_errors() -> dict[str, float]:
    return {
        sample.labels["reason"]: sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == "tpujob_gke_errors_total"
    }


@pytest.mark.parametrize("code", ["GCE_STOCKOUT", "GCE_QUOTA_EXCEEDED", "", "CLOUD_KMS_KEY_ERROR", "UNKNOWN"])
@pytest.mark.parametrize("retrying", [True, False, None])
def test_the_status_and_the_metric_give_a_pool_in_error_the_same_reason(code, retrying):
    """The pass that sees a pool go to ERROR: the job's status reason is the label its metric counts."""
    manifest = base_job("agree")
    manifest["metadata"].update(uid=f"agree-{code}-{retrying}", generation=1)
    job = parse_tpujob(manifest)
    name = naming.node_pool_name(job, 0)
    pool = s.PoolView(0, name, "ERROR", "GKE's words", code, retrying=retrying)
    decision = s.decide(s.Observed(job=job, pools=(pool,), now=NOW))
    creating = TPUJobStatus(node_pools=[NodePoolStatus(name=name, slice=0, state="PROVISIONING")])
    before = gke_errors()
    metrics.PassRecorder().record(job, creating, decision.status, NOW)
    counted = {reason for reason, value in gke_errors().items() if value != before.get(reason, 0.0)}
    assert counted == {decision.status.reason}
    assert decision.status.reason == s.pool_error_reason(code)
    assert decision.status.reason in metrics.GKE_ERROR_REASONS  # a series that exists from start
