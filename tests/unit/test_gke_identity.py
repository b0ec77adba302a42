"""The operator acts only as the Google identity it is given (TPUJOB_GKE_IDENTITY), never as whatever
Application Default Credentials find (gke.checked_credentials): the real google-auth, with a service account
key file, and with a metadata server on loopback answering as GCE's does for a node's account."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tpujob import gke

OPERATOR = "tpujob-ops@my-project.iam.gserviceaccount.com"
NODE = "123456789-compute@developer.gserviceaccount.com"  # the Compute Engine default account's form


def key_file(folder: Path, email: str) -> Path:
    """A service account key as the IAM API hands it out (type, client_email, private_key, token_uri)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    path = folder / "key.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "my-project",
                "private_key_id": "1",
                "private_key": pem,
                "client_email": email,
                "client_id": "1",
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    return path


@pytest.fixture
def no_other_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))  # no gcloud user login to find
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)


def test_no_identity_configured_is_refused_before_any_credentials_are_looked_for():
    with pytest.raises(gke.IdentityProblem) as refused:
        gke.checked_credentials("")
    assert "TPUJOB_GKE_IDENTITY" in str(refused.value)
    assert "does not fall back to its node's service account" in str(refused.value)


def test_a_key_for_the_named_account_is_used_and_one_for_another_is_refused(
    no_other_credentials: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file(tmp_path, OPERATOR)))
    credentials = gke.checked_credentials(OPERATOR)
    assert credentials.service_account_email == OPERATOR  # type: ignore[attr-defined]
    with pytest.raises(gke.IdentityProblem) as refused:
        gke.checked_credentials("someone-else@my-project.iam.gserviceaccount.com")
    assert f"act as {OPERATOR}, not someone-else@my-project.iam.gserviceaccount.com" in str(refused.value)


class MetadataServer(http.server.BaseHTTPRequestHandler):
    """GCE's metadata server as documented (cloud.google.com/compute/docs/metadata/querying-metadata): every
    answer carries `Metadata-Flavor: Google` (google-auth checks it), the default service account's info at
    instance/service-accounts/default/?recursive=true, its token at .../token."""

    email = NODE

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in ("/", ""):
            body: dict | str = ""
        elif path.endswith("/service-accounts/default/"):
            body = {"aliases": ["default"], "email": self.email, "scopes": [gke.CLOUD_PLATFORM]}
        elif path.endswith("/token"):
            body = {"access_token": "ya29.node-token", "expires_in": 3599, "token_type": "Bearer"}
        else:
            self.send_error(404)
            return
        data = (json.dumps(body) if body else "").encode()
        self.send_response(200)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "application/json" if body else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def metadata_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetadataServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def check_in_a_process(identity: str, metadata: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """google-auth reads GCE_METADATA_HOST when first imported: a process of its own, as the operator is."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"},
        "GCE_METADATA_HOST": metadata,
        "GCE_METADATA_IP": metadata,
        "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
    }
    code = (
        "import sys\nfrom tpujob import gke\n"
        "try:\n    gke.checked_credentials(sys.argv[1])\nexcept gke.IdentityProblem as p:\n"
        "    print(p)\n    sys.exit(3)\nprint('accepted')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, identity],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_nodes_own_account_is_refused_unless_it_is_the_one_named(metadata_server: str, tmp_path: Path):
    refused = check_in_a_process(OPERATOR, metadata_server, tmp_path)
    assert refused.returncode == 3, refused.stderr
    assert f"act as {NODE}, not {OPERATOR}" in refused.stdout
    named = check_in_a_process(NODE, metadata_server, tmp_path)
    assert (named.returncode, named.stdout.strip()) == (0, "accepted"), named.stderr
