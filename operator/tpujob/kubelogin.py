"""Who the operator is on the API server, and where: one identity for its own client (tpujob.kube) and for
kopf's watches (the login handler in handlers/startup.py), read the way client-go reads it. In a pod, its
service account: the projected token file, which the kubelet rotates in place. Else the kubeconfig:
KUBECONFIG (a list of files merged as kubectl merges them), else ~/.kube/config, exec credential plugins
such as `gke-gcloud-auth-plugin` included.

lightkube parses the kubeconfig and builds the client's TLS context (client certificates included); the
client's Authorization header is made here (Credentials), in lightkube's precedence: a token file read again
on a 401, a token, an exec plugin, a user name and password. An exec plugin's token is kept as client-go
keeps it: until its expiry, minted again then or on a 401, one run at a time (lightkube's ExecAuth runs the
plugin on every 401, from every thread that got one, and knows only the plugin API's v1alpha1 and v1beta1).
kopf takes plain credentials (`kopf.ConnectionInfo`): the token read or minted at its login, with the
plugin's expiry, so kopf logs in again before the API server refuses it, not after.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kopf
import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import User, UserExec

# Where the kubelet mounts a pod's service account (its token, the cluster's CA, the namespace).
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"
# A plugin that asks a person something has no one to ask here: as client-go's `interactiveMode: Never`.
PLUGIN_TIMEOUT_SECONDS = 60
# The fields of a kubeconfig's clusters and users that name files, relative to the file that holds them.
_FILE_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key", "tokenFile")),
}


def load() -> SingleConfig:
    """The service account in a pod, else the kubeconfig's current context."""
    if in_pod():
        config = KubeConfig.from_service_account(SERVICE_ACCOUNT)
    else:
        config = KubeConfig.from_dict(merged(kubeconfig_paths()))
    current = config.get()  # raises without a current context: None only when given a default
    assert current is not None
    return current


def in_pod() -> bool:
    """As client-go's InClusterConfig decides: the API server's service in the environment, a token
    mounted."""
    service = os.environ.get("KUBERNETES_SERVICE_HOST") and os.environ.get("KUBERNETES_SERVICE_PORT")
    return bool(service) and (SERVICE_ACCOUNT / "token").is_file()


def kubeconfig_paths() -> list[Path]:
    listed = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed or [DEFAULT_KUBECONFIG]]


def merged(paths: list[Path]) -> dict[str, Any]:
    """kubectl's merge of a list of kubeconfig files (missing ones skipped): the first file to set the
    current context wins, and so does the first to name a cluster, user or context. A relative file path
    is taken relative to the file that holds it."""
    merged: dict[str, Any] = {"current-context": None, "clusters": [], "contexts": [], "users": []}
    found = [path for path in paths if path.is_file()]
    if not found:
        raise FileNotFoundError(f"no kubeconfig at {os.pathsep.join(map(str, paths))}")
    for path in found:
        document = yaml.safe_load(path.read_text()) or {}
        merged["current-context"] = merged["current-context"] or document.get("current-context")
        for section in ("clusters", "contexts", "users"):
            named = {entry["name"] for entry in merged[section]}
            for entry in document.get(section) or []:
                if entry["name"] not in named:
                    merged[section].append(_absolute(section, entry, path.parent))
    return merged


def _absolute(section: str, entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    key, fields = _FILE_FIELDS.get(section, ("", ()))
    body = entry.get(key) or {}
    for field in fields:
        if body.get(field):
            body[field] = str(folder / Path(body[field]).expanduser())  # an absolute path stays as it is
    return entry


# --- the operator's client -----------------------------------------------------------------------------


class Credentials:
    """The operator's client's credentials, in lightkube's precedence (a token file, a token, a plugin, a
    user name and password); client certificates go in the TLS context (lightkube's verify_cluster).
    `authorization` is the Authorization header to send (None: no credentials); given the header the API
    server refused (401), a fresh one to try once more: a token file read again (the kubelet rotated it,
    as lightkube's BearerTokenFileAuth does), a plugin's token minted again (PluginAuth)."""

    def __init__(
        self, config: SingleConfig, now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    ) -> None:
        user = config.user or User()
        self._token_file = config.abs_file(user.token_file) if user.token_file else None
        plugin = user.exec if user.exec and not (user.token_file or user.token) else None
        self._plugin = PluginAuth(plugin, now) if plugin else None
        self._fixed: str | None = None
        if user.token:
            self._fixed = f"Bearer {user.token}"
        elif user.username and user.password:
            pair = f"{user.username}:{user.password}".encode()
            self._fixed = f"Basic {base64.b64encode(pair).decode()}"
        self._lock = threading.Lock()
        self._read: str | None = None  # the token file's header, as last read

    def authorization(self, refused: str | None = None) -> str | None:
        if self._token_file is not None:
            with self._lock:
                if self._read is None or self._read == refused:
                    self._read = f"Bearer {Path(self._token_file).read_text().strip()}"
                return self._read
        if self._plugin is not None:
            return f"Bearer {self._plugin.token(refused.removeprefix('Bearer ') if refused else None)}"
        return self._fixed


class PluginAuth:
    """An exec plugin's token for every request: kept until it expires, minted again then, or when the API
    server refuses it (401: revoked, or a clock apart); one plugin run at a time however many threads ask."""

    def __init__(self, plugin: UserExec, now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)):
        self.plugin, self._now = plugin, now
        self._lock = threading.Lock()
        self._token: tuple[str, dt.datetime | None] | None = None

    def token(self, refused: str | None = None) -> str:
        with self._lock:
            if self._token is None or self._token[0] == refused or _expired(self._token[1], self._now()):
                self._token = exec_credential(self.plugin)
            return self._token[0]


def _expired(expires: dt.datetime | None, now: dt.datetime) -> bool:
    return expires is not None and now >= expires


# --- kopf's login ---------------------------------------------------------------------------------------


def kopf_connection(config: SingleConfig, trust_env: bool) -> kopf.ConnectionInfo:
    """`config`'s server, TLS and credentials as kopf takes them, the token fresh: the token file read now
    (rotated by the kubelet), or the exec plugin run now. The same precedence as the operator's client
    (lightkube's user_auth): a token file, a token, a plugin, a user name and password."""
    cluster, user = config.cluster, config.user or User()
    token, expires = user.token, None
    if user.token_file:
        token = Path(config.abs_file(user.token_file)).read_text().strip()
    elif not token and user.exec:
        token, expires = exec_credential(user.exec)
    return kopf.ConnectionInfo(
        server=cluster.server,
        ca_path=config.abs_file(cluster.certificate_auth) if cluster.certificate_auth else None,
        ca_data=cluster.certificate_auth_data,
        insecure=cluster.insecure,
        certificate_path=config.abs_file(user.client_cert) if user.client_cert else None,
        certificate_data=user.client_cert_data,
        private_key_path=config.abs_file(user.client_key) if user.client_key else None,
        private_key_data=user.client_key_data,
        username=user.username,
        password=user.password,
        token=token,
        expiration=expires,
        default_namespace=config.context.namespace,
        trust_env=trust_env,
    )


def exec_credential(plugin: UserExec) -> tuple[str, dt.datetime | None]:
    """Run a kubeconfig's exec plugin as client-go does (its `env` over ours) and read the ExecCredential it
    prints: the token, and when it expires (`expirationTimestamp`, RFC 3339; none: until refused)."""
    printed = subprocess.run(
        [plugin.command, *(plugin.args or [])],
        env={**os.environ, **{v.name: v.value for v in plugin.env or []}},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
        timeout=PLUGIN_TIMEOUT_SECONDS,
    ).stdout
    return credential_of(json.loads(printed))


def credential_of(exec_credential: dict[str, Any]) -> tuple[str, dt.datetime | None]:
    status = exec_credential.get("status") or {}
    expiry = status.get("expirationTimestamp")
    return str(status["token"]), dt.datetime.fromisoformat(expiry.replace("Z", "+00:00")) if expiry else None
