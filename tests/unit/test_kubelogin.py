"""tpujob.kubelogin without an API server: which kubeconfig entries win, what kopf is handed, and how the
operator's client keeps its credentials (the API server's 401s played by a local HTTP server)."""

from __future__ import annotations

import datetime as dt
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import UserExec

from tpujob import kubehttp, kubelogin


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


class FakeApiServer:
    """Answers 401 to the tokens in `refused`, 200 to any other; the Authorization headers it was sent."""

    def __init__(self) -> None:
        self.refused: set[str] = set()
        self.sent: list[str] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                header = self.headers.get("Authorization") or ""
                fake.sent.append(header.removeprefix("Bearer "))
                self.send_response(401 if header.removeprefix("Bearer ") in fake.refused else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def client(self, credentials: kubelogin.Credentials) -> kubehttp.Connections:
        return kubehttp.Connections(
            f"http://127.0.0.1:{self.server.server_address[1]}", None, credentials.authorization
        )


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    fake = FakeApiServer()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def credentials(tmp_path: Path, user: dict[str, Any], **kwargs: Any) -> kubelogin.Credentials:
    config = KubeConfig.from_file(kubeconfig(tmp_path / "config", "c", "c", user)).get()
    assert config is not None
    return kubelogin.Credentials(config, **kwargs)


def exec_entry(plugin: Plugin) -> dict[str, Any]:
    """The kubeconfig's `exec` entry of `plugin`."""
    return {"apiVersion": plugin.exec.apiVersion, "command": plugin.exec.command, "args": plugin.exec.args}


def test_a_plugin_token_is_kept_until_it_expires_then_minted_again(
    tmp_path: Path, api_server: FakeApiServer
) -> None:
    plugin = Plugin(tmp_path, "2030-01-01T00:00:00Z")
    now = [dt.datetime(2029, 12, 31, 23, 0, tzinfo=dt.UTC)]
    http = api_server.client(credentials(tmp_path, {"exec": exec_entry(plugin)}, now=lambda: now[0]))

    http.request("GET", "/a")
    http.request("GET", "/b")
    now[0] = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    http.request("GET", "/c")

    assert api_server.sent == ["token-1", "token-1", "token-2"]
    assert plugin.count() == 2


def test_a_refused_plugin_token_is_minted_again_and_the_request_sent_once_more(
    tmp_path: Path, api_server: FakeApiServer
) -> None:
    plugin = Plugin(tmp_path, "2100-01-01T00:00:00Z")
    api_server.refused = {"token-1"}
    login = credentials(tmp_path, {"exec": exec_entry(plugin)})

    assert api_server.client(login).request("POST", "/pods", content=b"{}").status == 200

    assert api_server.sent == ["token-1", "token-2"]


def test_a_refused_token_file_is_read_again_and_the_request_sent_once_more(
    tmp_path: Path, api_server: FakeApiServer
) -> None:
    """The kubelet rotated the service account's token: the file has the new one (as lightkube's
    BearerTokenFileAuth, client-go's cachingTokenSource)."""
    token = tmp_path / "token"
    token.write_text("old\n")
    http = api_server.client(credentials(tmp_path, {"tokenFile": str(token)}))
    assert http.request("GET", "/a").status == 200
    token.write_text("new\n")
    api_server.refused = {"old"}

    assert http.request("GET", "/b").status == 200
    assert http.request("GET", "/c").status == 200

    assert api_server.sent == ["old", "old", "new", "new"]


def test_a_refused_fixed_token_is_not_sent_again(tmp_path: Path, api_server: FakeApiServer) -> None:
    api_server.refused = {"fixed"}
    http = api_server.client(credentials(tmp_path, {"token": "fixed"}))

    assert http.request("GET", "/a").status == 401
    assert api_server.sent == ["fixed"]


def test_a_user_name_and_password_go_as_basic_auth(tmp_path: Path) -> None:
    login = credentials(tmp_path, {"username": "u", "password": "p"})

    assert login.authorization() == "Basic dTpw"
