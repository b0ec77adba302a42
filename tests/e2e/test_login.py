"""Logins that must renew: a kubeconfig exec credential plugin (as `gke-gcloud-auth-plugin` is on GKE) whose
tokens the real API server accepts for a few seconds (tpujob_sandbox.exec_token). The operator's own client
and kopf's must each fetch a new token when theirs expires, or the job stops moving."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from cryptography.hazmat.primitives import serialization
from kubernetes import client as k8s

from tests.manifests import plain_job
from tpujob.api import constants as c
from tpujob_sandbox import OperatorProcess, operator_env, wait_for
from tpujob_sandbox.controlplane import SERVICE_ACCOUNT_ISSUER, ControlPlane
from tpujob_sandbox.exec_token import kubeconfig_user, mint
from tpujob_sandbox.operators import OPERATOR_ACCOUNT, OPERATOR_NAMESPACE, operator_kubeconfig
from tpujob_sandbox.pki import Pki

TOKEN_SECONDS = 5
API_SERVER_TOKEN_CACHE_SECONDS = 10


def signing_key_path(sandbox) -> Path:
    assert isinstance(sandbox.control_plane, ControlPlane), "needs the test bed's own control plane (its key)"
    return Pki(sandbox.control_plane.state_dir / "pki").service_account_key


def operator_account_uid(sandbox, tmp_path: Path) -> str:
    operator_kubeconfig(sandbox, tmp_path / "token-kubeconfig")  # the account and its RBAC, as the chart's
    account = k8s.CoreV1Api(sandbox.api_client).read_namespaced_service_account(
        OPERATOR_ACCOUNT, OPERATOR_NAMESPACE
    )
    return str(account.metadata.uid)


def plugin_kubeconfig(sandbox, tmp_path: Path, log: Path) -> Path:
    """The test bed's kubeconfig with its user replaced by the plugin, minting the operator's account."""
    arguments = [
        "--key", str(signing_key_path(sandbox)), "--issuer", SERVICE_ACCOUNT_ISSUER,
        "--namespace", OPERATOR_NAMESPACE, "--account", OPERATOR_ACCOUNT,
        "--uid", operator_account_uid(sandbox, tmp_path), "--ttl", str(TOKEN_SECONDS), "--log", str(log),
    ]  # fmt: skip
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    config["users"] = [{"name": "plugin", "user": kubeconfig_user(arguments)}]
    for context in config["contexts"]:
        context["context"]["user"] = "plugin"
    path = tmp_path / "plugin-kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def authenticated(sandbox, token: str) -> bool:
    """Whether the API server takes `token`: any answer but 401 (a 403 or a 404 comes after the login)."""
    configuration = k8s.Configuration()
    configuration.host = sandbox.api_client.configuration.host
    configuration.ssl_ca_cert = sandbox.api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    with k8s.ApiClient(configuration) as api:
        try:
            k8s.CustomObjectsApi(api).list_cluster_custom_object(c.GROUP, c.VERSION, c.PLURAL, limit=1)
        except k8s.ApiException as error:
            return int(error.status) != 401
    return True


def test_the_api_server_takes_a_plugin_token_only_for_its_lifetime(sandbox, tmp_path):
    """The premise, measured: the real API server refuses the token once its lifetime has passed."""
    key = serialization.load_pem_private_key(signing_key_path(sandbox).read_bytes(), password=None)
    uid = operator_account_uid(sandbox, tmp_path)  # its API calls before the clock starts
    minted = time.monotonic()
    token = mint(key, SERVICE_ACCOUNT_ISSUER, OPERATOR_NAMESPACE, OPERATOR_ACCOUNT, uid, TOKEN_SECONDS)
    assert authenticated(sandbox, token)
    wait_for(lambda: not authenticated(sandbox, token), timeout=30, interval=0.5, what="the token refused")
    lasted = time.monotonic() - minted
    print(f"a {TOKEN_SECONDS} s plugin token was refused {lasted:.1f} s after it was minted")
    # Refused at the later of its expiry and 10 s after its first use: kube-apiserver caches a successful
    # token authentication for 10 s (its TokenSuccessCacheTTL). The 5 s after are the test's polls (every
    # 0.5 s, each a new client) on a machine that may be loaded.
    assert TOKEN_SECONDS - 1 <= lasted <= max(TOKEN_SECONDS, API_SERVER_TOKEN_CACHE_SECONDS) + 5


def test_an_operator_logged_in_through_an_expiring_plugin_keeps_working_token_after_token(
    sandbox, operator, jobs, gke, kubelet, tmp_path
):
    """kopf (its watches, the finalizer) and the operator's client (status writes, pods) each renew their
    token: a job goes from creation to Succeeded and is deleted through the finalizer over several token
    lifetimes."""
    minted = tmp_path / "minted.log"
    env = operator_env(sandbox, tmp_path) | {"KUBECONFIG": str(plugin_kubeconfig(sandbox, tmp_path, minted))}
    operator.kill()  # the session's operator steps aside for one that logs in through the plugin
    plugin_operator = OperatorProcess(env, tmp_path / "operator.log").start()
    try:
        jobs.create(plain_job("renew", tpu={"type": "v5e", "topology": "2x2"}))
        (pod,) = jobs.wait_pods_running("renew", 1, timeout=60)
        running_at = time.time()

        def tokens_after(moment: float) -> list[float]:
            return [float(t) for t in minted.read_text().split() if float(t) > moment]

        # Three token lifetimes on, with the operator resyncing every 2 s: both clients renewed meanwhile.
        wait_for(lambda: any(t > running_at + 3 * TOKEN_SECONDS for t in tokens_after(running_at)),
                 timeout=60, what="tokens minted three lifetimes on")  # fmt: skip
        kubelet.succeed(jobs.namespace, pod.metadata.name)
        status = jobs.wait_phase("renew", "Succeeded", timeout=60)  # a status write with a renewed token
        assert status["nodePools"][0]["state"] in ("STOPPING", "Deleted")  # the next pass may see it gone
        pool = status["nodePools"][0]["name"]
        jobs.delete("renew")  # kopf's finalizer handler, through kopf's own renewed login
        wait_for(lambda: jobs.gone("renew") and pool not in gke.node_pools(), timeout=60, what="the job gone")
        tokens = tokens_after(0)
        print(f"{len(tokens)} tokens minted over {tokens[-1] - tokens[0]:.0f} s")
        assert len(tokens) >= 4
    finally:
        plugin_operator.stop()
        operator.start()
