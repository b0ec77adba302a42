"""tpujob.kube, the operator's Kubernetes calls, and tpujob.kubelogin, its login and kopf's, against the real
API server of the test bed: the calls, their refusals, and the logins users have (a kubeconfig with an exec
credential plugin, as `gke-gcloud-auth-plugin`; the in-cluster service account with a rotated token)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from lightkube.config.models import User

from tpujob import kube, kubelogin
from tpujob.api import constants as c
from tpujob_sandbox import Sandbox, install_crd, token_kubeconfig, wait_for


@pytest.fixture
def api(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> kube.Kube:
    monkeypatch.setenv("KUBECONFIG", str(sandbox.kubeconfig))
    return kube.Kube.login()


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


def test_pods_are_created_and_deleted_once(api: kube.Kube, namespace: str, core: k8s.CoreV1Api) -> None:
    assert api.create_pod(namespace, pod("one")) is True
    assert api.create_pod(namespace, pod("one")) is False  # exists: not an error
    assert core.read_namespaced_pod("one", namespace).spec.containers[0].image == "busybox"
    assert api.delete_pod(namespace, "one") is True
    assert api.delete_pod(namespace, "never-was") is False  # gone: not an error


def test_refusals_carry_the_status_and_the_api_servers_message(api: kube.Kube, namespace: str) -> None:
    with pytest.raises(kube.ApiError) as refused:
        api.create_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["reason"] == "Invalid"
    assert b"spec.containers" in refused.value.body


def test_a_tpujob_is_read_patched_conditionally_and_its_status_alone(
    sandbox: Sandbox, api: kube.Kube, namespace: str
) -> None:
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
    k8s.CustomObjectsApi(sandbox.api_client).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job
    )
    written = api.patch_tpujob_status(namespace, "j", {"status": {"phase": "Pending"}})
    assert written["status"]["phase"] == "Pending"
    ignored = api.patch_tpujob_status(namespace, "j", {"spec": {"tpu": {"topology": "4x4"}}})
    assert ignored["spec"]["tpu"]["topology"] == "2x2"  # /status writes nothing but status

    stale = {"metadata": {"resourceVersion": "1", "finalizers": [c.FINALIZER]}}
    with pytest.raises(kube.ApiError) as conflict:
        api.patch_tpujob(namespace, "j", stale)
    assert conflict.value.status == 409

    found = api.get_tpujob(namespace, "j")
    assert found is not None and found["metadata"]["name"] == "j"
    assert api.delete_tpujob(namespace, "j") is True
    assert api.delete_tpujob(namespace, "j") is False
    assert api.get_tpujob(namespace, "j") is None


def test_nodes_are_listed_by_label(api: kube.Kube, core: k8s.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "labelled-node", "labels": {"tpujob.dev/test-list": "yes"}}})
    try:
        names = [n["metadata"]["name"] for n in api.list_nodes("tpujob.dev/test-list=yes")]
        assert names == ["labelled-node"]
    finally:
        core.delete_node("labelled-node")


# --- logins users have ---------------------------------------------------------------------------


def _cluster_and_token(
    sandbox: Sandbox, namespace: str, folder: Path, account: str = "default"
) -> tuple[dict[str, Any], str]:
    """The test bed's cluster entry and a ServiceAccount token that may read nothing but discovery."""
    if account != "default":
        k8s.CoreV1Api(sandbox.api_client).create_namespaced_service_account(
            namespace, {"metadata": {"name": account}}
        )
    config = yaml.safe_load(token_kubeconfig(sandbox, namespace, account, folder / account).read_text())
    return config, config["users"][0]["user"]["token"]


def test_a_kubeconfig_with_an_exec_credential_plugin_logs_in_both_kopf_and_the_operator(
    sandbox: Sandbox, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How everyone reaches GKE: `users[].user.exec` runs gke-gcloud-auth-plugin, which prints an
    ExecCredential. Here a small script prints one holding a ServiceAccount's token and counts its runs."""
    config, token = _cluster_and_token(sandbox, namespace, tmp_path)
    runs = tmp_path / "runs"
    plugin = tmp_path / "auth-plugin.py"
    expires = "2100-01-01T00:00:00Z"
    plugin.write_text(
        "import json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "runs.write_text(runs.read_text() + 'x' if runs.exists() else 'x')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        f"                  'status': {{'token': {token!r}, 'expirationTimestamp': {expires!r}}}}}))\n"
    )
    config["users"] = [
        {
            "name": "plugin-user",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(plugin)],
                    "interactiveMode": "Never",
                    "provideClusterInfo": True,
                }
            },
        }
    ]
    for context in config["contexts"]:
        context["context"]["user"] = "plugin-user"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))

    api = kube.Kube.login()
    # The namespace's default ServiceAccount may not list nodes: a 403 names the account the plugin gave.
    for _ in range(2):
        with pytest.raises(kube.ApiError) as forbidden:
            api.list_nodes("any")
        assert forbidden.value.status == 403
        assert f"system:serviceaccount:{namespace}:default".encode() in forbidden.value.body
    assert runs.read_text() == "x", "the token is kept until it expires"

    connection = kubelogin.kopf_connection(kubelogin.load(), trust_env=False)
    assert connection.token == token
    assert connection.expiration == dt.datetime(2100, 1, 1, tzinfo=dt.UTC)  # kopf logs in again then
    assert runs.read_text() == "xx", "kopf's login runs the plugin: a token of its own"


def test_in_a_pod_the_service_account_token_is_read_again_after_rotation(
    sandbox: Sandbox, namespace: str, core: k8s.CoreV1Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet rotates a projected token in place, and the old one stops working in time: the client
    reads the file again when the API server refuses the token it has (401), and kopf at each login. Here
    the old token is revoked (its Secret deleted) as the file gets a new one, of another account."""
    config, old_token = _cluster_and_token(sandbox, namespace, tmp_path, "before")
    _, new_token = _cluster_and_token(sandbox, namespace, tmp_path, "after")
    server = config["clusters"][0]["cluster"]["server"].removeprefix("https://")
    host, port = server.rsplit(":", 1)
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(old_token)
    (account / "namespace").write_text(namespace)
    ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    (account / "ca.crt").write_bytes(ca)
    monkeypatch.setattr(kubelogin, "SERVICE_ACCOUNT", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setenv("KUBECONFIG", str(sandbox.kubeconfig))  # not taken: in a pod, the service account

    api = kube.Kube.login()
    assert f":{namespace}:before".encode() in _refused_as(api)
    assert kubelogin.kopf_connection(kubelogin.load(), trust_env=False).token == old_token

    (account / "token").write_text(new_token)
    secret = core.read_namespaced_service_account("before", namespace).secrets[0].name
    core.delete_namespaced_secret(secret, namespace)
    wait_for(lambda: _refused_with(old_token) == 401, timeout=30, what="the old token refused")

    assert f":{namespace}:after".encode() in _refused_as(api)  # a 401, the file read again, the new token
    assert kubelogin.kopf_connection(kubelogin.load(), trust_env=False).token == new_token


def _refused_as(api: kube.Kube) -> bytes:
    """The 403's body, which names the account: a ServiceAccount may not list nodes."""
    with pytest.raises(kube.ApiError) as forbidden:
        api.list_nodes("any")
    assert forbidden.value.status == 403
    return forbidden.value.body


def _refused_with(token: str) -> int:
    """The status of a request with `token` alone (no file to read again)."""
    config = kubelogin.load()
    return kube.http_client(config._replace(user=User(token=token))).request("GET", "/api/v1/nodes").status


def test_maintenance_notices_are_read_off_the_nodes_and_a_missing_permission_is_said_once(
    api: kube.Kube, sandbox: Sandbox, namespace: str, core: k8s.CoreV1Api, tmp_path: Path, monkeypatch
) -> None:
    from tpujob.reconciler import Reconciler
    from tpujob.render import Cluster
    from tpujob.render.plan import MAINTENANCE_LABEL

    core.create_node({"metadata": {"name": "tpu-under-notice", "labels": {MAINTENANCE_LABEL: "1900000000"}}})
    try:
        admin = Reconciler(Cluster(), api, None)
        admin.refresh_maintenance()
        # What the next pass's snapshot holds (reconciler/snapshot.py).
        assert admin.watched.take("{}").maintenance.get("tpu-under-notice") == 1_900_000_000
        # A namespace's default ServiceAccount may not list nodes (as an operator with an older chart's RBAC).
        monkeypatch.setenv(
            "KUBECONFIG", str(token_kubeconfig(sandbox, namespace, "default", tmp_path / "kc"))
        )
        limited = Reconciler(Cluster(), kube.Kube.login(), None)
        limited.refresh_maintenance()
        limited.refresh_maintenance()  # not asked again
        assert limited.watched.take("{}").maintenance == {} and limited.observer.maintenance_forbidden
    finally:
        core.delete_node("tpu-under-notice")
