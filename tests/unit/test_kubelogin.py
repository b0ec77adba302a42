"""tpujob.kubelogin without an API server: which kubeconfig entries win, what kopf is handed, and how the
operator's client keeps an exec plugin's token (the API server's answers played by httpx's MockTransport)."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import UserExec

from tpujob import kubelogin


def kubeconfig(path: Path, current: str | None, cluster: str, user: dict[str, Any]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": current,
                "clusters": [
                    {
                        "name": cluster,
                        "cluster": {"server": f"https://{cluster}", "certificate-authority": "ca.crt"},
                    }
                ],
                "users": [{"name": "me", "user": user}],
                "contexts": [
                    {"name": cluster, "context": {"cluster": cluster, "user": "me", "namespace": "ns"}}
                ],
            }
        )
    )
    return path


def test_a_list_of_kubeconfigs_is_merged_as_kubectl_merges_it(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = kubeconfig(tmp_path / "a" / "config", None, "one", {"tokenFile": "token"})
    second = kubeconfig(tmp_path / "b" / "config", "one", "two", {"token": "from-b"})

    merged = kubelogin.merged([tmp_path / "missing", first, second])

    config = KubeConfig.from_dict(merged).get()
    assert config.context_name == "one"  # the first file to set it: the second
    assert config.user is not None and config.user.token_file == str(
        tmp_path / "a" / "token"
    )  # the first "me"
    assert config.cluster.certificate_auth == str(tmp_path / "a" / "ca.crt")  # relative to its own file
    assert [c["name"] for c in merged["clusters"]] == ["one", "two"]


def test_no_kubeconfig_at_all_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        kubelogin.merged([tmp_path / "nowhere"])


def test_kopf_is_handed_the_token_file_as_it_is_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("rotated\n")
    kubeconfig(
        tmp_path / "config", "one", "one", {"tokenFile": "token", "client-certificate-data": "Q0VSVA=="}
    )
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))

    connection = kubelogin.kopf_connection(kubelogin.load(), trust_env=False)

    assert (connection.server, connection.token, connection.expiration) == ("https://one", "rotated", None)
    assert connection.ca_path == tmp_path / "ca.crt" or connection.ca_path == str(tmp_path / "ca.crt")
    assert connection.certificate_data == "Q0VSVA==" and connection.default_namespace == "ns"


def test_an_exec_credentials_expiry_is_read_in_utc() -> None:
    printed = {"status": {"token": "t", "expirationTimestamp": "2030-05-06T07:08:09Z"}}
    assert kubelogin.credential_of(printed) == ("t", dt.datetime(2030, 5, 6, 7, 8, 9, tzinfo=dt.UTC))
    assert kubelogin.credential_of({"status": {"token": "t"}}) == ("t", None)


class Plugin:
    """An exec plugin that mints token-1, token-2, ... (one per run), each expiring at `expires`."""

    def __init__(self, folder: Path, expires: str) -> None:
        self.runs = folder / "runs"
        script = folder / "plugin.py"
        script.write_text(
            "import json, pathlib, sys\n"
            "runs = pathlib.Path(sys.argv[1])\n"
            "n = len(runs.read_text()) + 1 if runs.exists() else 1\n"
            "runs.write_text('x' * n)\n"
            "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
            "                  'status': {'token': f'token-{n}', 'expirationTimestamp': sys.argv[2]}}))\n"
        )
        self.exec = UserExec(
            apiVersion="client.authentication.k8s.io/v1",
            command=sys.executable,
            args=[str(script), str(self.runs), expires],
        )

    def count(self) -> int:
        return len(self.runs.read_text()) if self.runs.exists() else 0


def client(auth: httpx2.Auth, refused: set[str]) -> tuple[httpx2.Client, list[str]]:
    """A client whose API server answers 401 to the tokens in `refused`; the tokens it was sent, in order."""
    sent: list[str] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        token = request.headers["Authorization"].removeprefix("Bearer ")
        sent.append(token)
        return httpx2.Response(401 if token in refused else 200, content=json.dumps({}).encode())

    return httpx2.Client(base_url="https://api", transport=httpx2.MockTransport(answer), auth=auth), sent


def test_a_plugin_token_is_kept_until_it_expires_then_minted_again(tmp_path: Path) -> None:
    plugin = Plugin(tmp_path, "2030-01-01T00:00:00Z")
    now = [dt.datetime(2029, 12, 31, 23, 0, tzinfo=dt.UTC)]
    http, sent = client(kubelogin.PluginAuth(plugin.exec, now=lambda: now[0]), refused=set())

    http.get("/a")
    http.get("/b")
    now[0] = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    http.get("/c")

    assert sent == ["token-1", "token-1", "token-2"]
    assert plugin.count() == 2


def test_a_refused_plugin_token_is_minted_again_and_the_request_sent_once_more(tmp_path: Path) -> None:
    plugin = Plugin(tmp_path, "2100-01-01T00:00:00Z")
    http, sent = client(kubelogin.PluginAuth(plugin.exec), refused={"token-1"})

    assert http.post("/pods", content=b"{}").status_code == 200

    assert sent == ["token-1", "token-2"]
