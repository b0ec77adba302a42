"""A kubeconfig exec credential plugin, as `gke-gcloud-auth-plugin` is one: each run prints an
ExecCredential (client.authentication.k8s.io/v1beta1) holding a token that the real API server accepts
for only `--ttl` seconds. For tests of logins that must renew, in seconds instead of GKE's hour.

The token is a bound service account token (the claims the API server's TokenRequest issues), signed with
the test bed's service account signing key, for an existing ServiceAccount, so the account's RBAC
applies. The API server allows a minute of clock skew past `exp` (go-jose's DefaultLeeway, used by
kube-apiserver's service account token validation), so `exp` is set a minute early: the token expires
`--ttl` seconds after it was minted, which is the expiry the plugin reports. The API server also caches a
successful token authentication for 10 s (kube-apiserver's token success cache), so a token is refused at
the later of its expiry and 10 s after its first use (tests/e2e/test_login.py measures it: 10.6 s for a 5 s
token).

    python -m tpujob_sandbox.exec_token --key SA_KEY --issuer URL --namespace NS --account NAME --uid UID \
        --ttl 5 --log FILE
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

API_VERSION = "client.authentication.k8s.io/v1beta1"
LEEWAY_SECONDS = 60  # go-jose jwt.DefaultLeeway


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(key: rsa.RSAPrivateKey, issuer: str, namespace: str, account: str, uid: str, ttl: float) -> str:
    """A JWT the API server takes for system:serviceaccount:<namespace>:<account> for `ttl` seconds."""
    now = int(time.time())
    claims = {
        "iss": issuer,
        "aud": [issuer],  # the API server's audience when --api-audiences is not set: its issuer
        "sub": f"system:serviceaccount:{namespace}:{account}",
        "iat": now - 1,
        "nbf": now - 1,
        "exp": now + int(ttl) - LEEWAY_SECONDS,
        "kubernetes.io": {"namespace": namespace, "serviceaccount": {"name": account, "uid": uid}},
    }
    header = {"alg": "RS256", "typ": "JWT"}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


def credential(token: str, ttl: float) -> dict[str, object]:
    expires = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=ttl)
    return {
        "apiVersion": API_VERSION,
        "kind": "ExecCredential",
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


def kubeconfig_user(arguments: list[str]) -> dict[str, object]:
    """The kubeconfig `user` entry that runs this plugin with `arguments`."""
    return {
        "exec": {
            "apiVersion": API_VERSION,
            "command": sys.executable,
            "args": ["-m", "tpujob_sandbox.exec_token", *arguments],
        }
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", type=Path, required=True, help="the service account signing key (PEM)")
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--account", required=True)
    parser.add_argument("--uid", required=True, help="the ServiceAccount's uid")
    parser.add_argument("--ttl", type=float, default=5.0, help="seconds the token works")
    parser.add_argument("--log", type=Path, help="a line per token minted")
    args = parser.parse_args(argv)
    key = serialization.load_pem_private_key(args.key.read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    token = mint(key, args.issuer, args.namespace, args.account, args.uid, args.ttl)
    if args.log is not None:
        with args.log.open("a") as log:
            log.write(f"{time.time():.3f}\n")
    json.dump(credential(token, args.ttl), sys.stdout)


if __name__ == "__main__":
    main()
