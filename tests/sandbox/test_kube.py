"""tpujob.kube, the operator's own Kubernetes client, against the real API server of the test bed."""

from __future__ import annotations

from pathlib import Path

import kopf
import pytest
from kubernetes import client as k8s

from tpujob import kube
from tpujob.api import constants as c
from tpujob_sandbox import Sandbox, install_crd


@pytest.fixture
def api(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> kube.Kube:
    monkeypatch.setenv("KUBECONFIG", str(sandbox.kubeconfig))
    return kube.Kube.login(kopf.OperatorSettings())


def config_map(name: str, value: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": value}}


def test_create_get_patch_delete_round_trip(api: kube.Kube, namespace: str, core: k8s.CoreV1Api) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    assert api.create(path, config_map("one", "a")) is True
    assert api.create(path, config_map("one", "b")) is False  # exists: not an error, not overwritten
    assert core.read_namespaced_config_map("one", namespace).data == {"k": "a"}

    patched = api.merge_patch(f"{path}/one", {"data": {"k": "c"}})
    assert patched["data"] == {"k": "c"} and patched["metadata"]["resourceVersion"]
    fetched = api.get(f"{path}/one")
    assert fetched is not None and fetched["data"] == {"k": "c"}

    assert api.delete(f"{path}/one") is True
    assert api.delete(f"{path}/one") is False  # gone: not an error
    assert api.get(f"{path}/one") is None


def test_refusals_carry_the_status_and_the_reason(api: kube.Kube, namespace: str) -> None:
    with pytest.raises(kube.ApiError) as refused:
        api.create(kube.pods(namespace), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    assert refused.value.status == 422 and refused.value.reason == "Invalid"
    assert "spec.containers" in str(refused.value)

    stale = {"metadata": {"resourceVersion": "1"}, "data": {"k": "z"}}
    api.create(f"/api/v1/namespaces/{namespace}/configmaps", config_map("two", "a"))
    with pytest.raises(kube.ApiError) as conflict:
        api.merge_patch(f"/api/v1/namespaces/{namespace}/configmaps/two", stale)
    assert conflict.value.status == 409 and conflict.value.reason == "Conflict"


def test_status_subresource_of_a_tpujob(sandbox: Sandbox, api: kube.Kube, namespace: str) -> None:
    install_crd(sandbox)
    job = {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": "TPUJob",
        "metadata": {"name": "j"},
        "spec": {
            "tpu": {"type": "v5e", "topology": "2x2"},
            "nodePool": {"policy": "existing"},
            "trainer": {"image": "trainer:1"},
        },
    }
    assert api.create(kube.tpujobs(namespace), job) is True
    written = api.merge_patch(kube.tpujobs(namespace, "j", "status"), {"status": {"phase": "Pending"}})
    assert written["status"]["phase"] == "Pending"
    ignored = api.merge_patch(kube.tpujobs(namespace, "j", "status"), {"spec": {"tpu": {"topology": "4x4"}}})
    assert ignored["spec"]["tpu"]["topology"] == "2x2"  # /status writes nothing but status
    assert api.delete(kube.tpujobs(namespace, "j"), propagation="Background") is True


def test_a_rotated_service_account_token_is_read_again(
    sandbox: Sandbox, api: kube.Kube, namespace: str, tmp_path: Path
) -> None:
    good = api._token
    token_file = tmp_path / "token"
    token_file.write_text(f"{good}\n")
    rotated = kube.Kube(
        kopf.ConnectionInfo(server=api.server, ca_data=_ca_data(sandbox), token="expired-token"),
        token_path=str(token_file),
    )
    # The first answer is 401 for the old token; the client reads the file and succeeds.
    assert rotated.get(f"/api/v1/namespaces/{namespace}") is not None
    assert rotated._token == good


def _ca_data(sandbox: Sandbox) -> str:
    import yaml

    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    return str(config["clusters"][0]["cluster"]["certificate-authority-data"])


def test_maintenance_notices_are_read_off_the_nodes_and_a_missing_permission_is_said_once(
    api: kube.Kube, sandbox: Sandbox, namespace: str, core: k8s.CoreV1Api, tmp_path: Path, monkeypatch
) -> None:
    from tpujob.reconciler import Reconciler
    from tpujob.render import Cluster
    from tpujob.render.plan import MAINTENANCE_LABEL
    from tpujob_sandbox import token_kubeconfig

    core.create_node({"metadata": {"name": "tpu-under-notice", "labels": {MAINTENANCE_LABEL: "1900000000"}}})
    try:
        admin = Reconciler(Cluster(), api, None)
        admin.refresh_maintenance()
        assert admin.observer.maintenance.get("tpu-under-notice") == 1_900_000_000
        # A namespace's default ServiceAccount may not list nodes (as an operator with an older chart's RBAC).
        monkeypatch.setenv(
            "KUBECONFIG", str(token_kubeconfig(sandbox, namespace, "default", tmp_path / "kc"))
        )
        limited = Reconciler(Cluster(), kube.Kube.login(kopf.OperatorSettings()), None)
        limited.refresh_maintenance()
        limited.refresh_maintenance()  # not asked again
        assert limited.observer.maintenance == {} and limited.observer.maintenance_forbidden
    finally:
        core.delete_node("tpu-under-notice")
