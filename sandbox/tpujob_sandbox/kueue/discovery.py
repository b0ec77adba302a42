"""Which Workload API version the test bed's Kueue CRDs serve, as the operator finds it (discovery): the
simulated Kueue speaks that version too, as a real Kueue of that release would (v1beta2 from v0.15, v1beta1
alone before)."""

from __future__ import annotations

import json

from kubernetes import client as k8s

from tpujob_sandbox.kueue.objects import GROUP, VERSIONS


def served_version(api_client: k8s.ApiClient) -> str | None:
    """The first of VERSIONS the group serves; None when it is not served (the CRDs absent)."""
    try:
        response = api_client.call_api(
            f"/apis/{GROUP}", "GET", auth_settings=["BearerToken"], _preload_content=False
        )[0]
    except k8s.ApiException as error:
        if error.status == 404:
            return None
        raise
    served = {v.get("version") for v in json.loads(response.data).get("versions") or ()}
    return next((v for v in VERSIONS if v in served), None)
