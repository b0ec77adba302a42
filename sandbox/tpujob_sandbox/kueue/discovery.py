"""Which Workload API version the test bed's Kueue CRDs serve, as the operator finds it (discovery): the
simulated Kueue speaks that version too, as a real Kueue of that release would (v1beta2 from v0.15, v1beta1
alone before)."""

from __future__ import annotations

from kubernetes import client as k8s

from tpujob_sandbox.kueue.objects import GROUP, VERSIONS
from tpujob_sandbox.reads import get_json


def served_version(api_client: k8s.ApiClient) -> str | None:
    """The first of VERSIONS the group serves; None when it is not served (the CRDs absent)."""
    try:
        group = get_json(api_client, f"/apis/{GROUP}")
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise
    served = {v.get("version") for v in group.get("versions") or ()}
    return next((v for v in VERSIONS if v in served), None)
