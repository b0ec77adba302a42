"""GKE's node pool condition codes, read in one place: what the status, the metrics and the GKE client
make of a pool's `conditions[]` (container_v1.StatusCondition.Code), so the three cannot disagree."""

from __future__ import annotations

from tpujob.api.status import Reason

# The codes that mean "no capacity or quota now": GKE retries them itself while the create operation runs.
_CAPACITY_CONDITIONS = {"GCE_STOCKOUT": Reason.STOCKOUT, "GCE_QUOTA_EXCEEDED": Reason.QUOTA}


def capacity_shortage(condition: str | None) -> str | None:
    """`Stockout` or `QuotaExceeded` for a code GKE retries itself while the create runs; None otherwise."""
    return _CAPACITY_CONDITIONS.get(condition or "")


def pool_error_reason(condition: str | None) -> str:
    """Why a pool is in ERROR, from its condition code: capacity or quota, else the pool is broken
    (`NodePoolLost`). The status' reason and `tpujob_gke_errors_total`'s label both come from here."""
    return capacity_shortage(condition) or Reason.POOL_LOST


__all__ = ["capacity_shortage", "pool_error_reason"]
