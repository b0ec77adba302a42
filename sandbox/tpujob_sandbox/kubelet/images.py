"""Image pulls as the kubelet makes them, against a simulated registry: which images exist and which hosts
want credentials are test bed controls (no registry can be reached here); what the kubelet then reports is
the kubelet's.

The kubelet's side (kubernetes/kubernetes pkg/kubelet/images/image_manager.go, EnsureImageExists):
- an image reference that does not parse: waiting reason InvalidImageName, message
  `Failed to apply default image tag "<image>": couldn't parse image reference "<image>": invalid
  reference format` (applyDefaultImageTag);
- imagePullPolicy Never and the image not on the node: ErrImageNeverPull, `Container image "<image>" is
  not present with pull policy of Never`;
- a pull in its back-off window: ImagePullBackOff, `Back-off pulling image "<image>"` (Normal event
  BackOff), no pull;
- a failed pull: ErrImagePull with the runtime's error as the message (Warning event Failed,
  `Failed to pull image "<image>": <error>`), and the back-off grows: 10 s, doubling, at most 300 s
  (pkg/kubelet/kubelet.go: flowcontrol.NewBackOff(backOffPeriod, MaxContainerBackOff)), keyed by pod UID
  and image;
- a pull that passes: Normal events Pulling, Pulled; the image is then on the node.
The runtime's error texts are containerd's as seen in public reports: a missing image
`rpc error: code = NotFound desc = failed to pull and unpack image "<ref>": failed to resolve reference
"<ref>": <ref>: not found` (forcedotcom/salesforcedx-docker#35, labring/sealos#4117); a registry that wants
credentials `rpc error: code = Unknown desc = failed to pull and unpack image "<ref>": failed to resolve
reference "<ref>": pulling from host <host> failed with status code [manifests <tag>]: 401 Unauthorized`
(kubernetes/kubernetes#110675). Pull secrets: the pod's imagePullSecrets of type
kubernetes.io/dockerconfigjson, their `auths` by registry host; a pull secret that does not exist is
skipped (the kubelet logs it and pulls without it: pkg/kubelet/kubelet_pods.go getPullSecretsForPod).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass
from typing import Any

# distribution/reference's grammar, enough to refuse what it refuses: lowercase path components separated by
# '/', an optional host[:port] first, an optional tag, an optional digest.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = (
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
)
_REFERENCE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?$"
)
DOCKER_HUB = "docker.io"
BACK_OFF_SECONDS = 10.0
MAX_BACK_OFF_SECONDS = 300.0


def is_valid_reference(image: str) -> bool:
    return bool(_REFERENCE.match(image))


def normalized(image: str) -> str:
    """As containerd names it: docker.io/library/ for a bare name, :latest without a tag or digest."""
    first, _, rest = image.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        image = f"{DOCKER_HUB}/{image if rest else 'library/' + image}"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        image += ":latest"
    return image


def registry_host(image: str) -> str:
    return normalized(image).split("/", 1)[0]


def _tag(reference: str) -> str:
    last = reference.rsplit("/", 1)[-1]
    return last.split("@", 1)[1] if "@" in last else last.rsplit(":", 1)[1]


@dataclass(frozen=True)
class PullOutcome:
    """What EnsureImageExists ends in: no reason (the image is there), or the waiting reason and message,
    and the events it posted as (type, reason, message)."""

    reason: str = ""
    message: str = ""
    events: tuple[tuple[str, str, str], ...] = ()


class Registry:
    """The images the test bed's pods may pull. By default every valid reference exists and needs no
    credentials; `missing` and `private` change that (test controls). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._missing: set[str] = set()
        self._private: dict[str, tuple[str, str]] = {}

    def missing(self, image: str) -> None:
        """The image (any reference form) does not exist in its registry."""
        with self._lock:
            self._missing.add(normalized(image))

    def private(self, host: str, username: str, password: str) -> None:
        """Images of `host` pull only with these credentials (from a pod's imagePullSecrets)."""
        with self._lock:
            self._private[host] = (username, password)

    def clear(self) -> None:
        """Back to the default: every valid reference exists and needs no credentials. The test bed's
        `kubelet` fixture clears these controls around each test: the kubelet lives for the session, and a
        host one test made private would refuse a later test's pods (ErrImagePull, Pending)."""
        with self._lock:
            self._missing.clear()
            self._private.clear()

    def pull_error(self, image: str, credentials: list[tuple[str, str, str]]) -> str | None:
        """The runtime's error pulling `image` with (host, username, password) credentials; None: pulled."""
        reference = normalized(image)
        host = registry_host(image)
        with self._lock:
            wanted = self._private.get(host)
            absent = reference in self._missing
        if wanted is not None and (host, *wanted) not in credentials:
            return (
                f'rpc error: code = Unknown desc = failed to pull and unpack image "{reference}": failed to '
                f'resolve reference "{reference}": pulling from host {host} failed with status code '
                f"[manifests {_tag(reference)}]: 401 Unauthorized"
            )
        if absent:
            return (
                f'rpc error: code = NotFound desc = failed to pull and unpack image "{reference}": failed to '
                f'resolve reference "{reference}": {reference}: not found'
            )
        return None


def docker_config_credentials(secret_data: dict[str, str]) -> list[tuple[str, str, str]]:
    """(host, username, password) from a kubernetes.io/dockerconfigjson Secret's data (base64 values)."""
    raw = secret_data.get(".dockerconfigjson")
    if not raw:
        return []
    try:
        auths = json.loads(base64.b64decode(raw)).get("auths") or {}
    except (ValueError, AttributeError):
        return []
    found = []
    for host, entry in auths.items():
        username, password = entry.get("username", ""), entry.get("password", "")
        if entry.get("auth"):
            username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        found.append((host.removeprefix("https://").split("/")[0], username, password))
    return found


class PullBackOff:
    """The kubelet's image back-off: per (pod UID, image), 10 s after a failed pull, doubling to 300 s;
    `scale` shortens it for tests. Thread-safe."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self._lock = threading.Lock()
        self._until: dict[tuple[str, str], tuple[float, float]] = {}  # key -> (until, last delay)

    def in_back_off(self, key: tuple[str, str], now: float) -> bool:
        with self._lock:
            return key in self._until and now < self._until[key][0]

    def failed(self, key: tuple[str, str], now: float) -> float:
        """A pull failed: the next is not before the returned time."""
        with self._lock:
            delay = BACK_OFF_SECONDS if key not in self._until else self._until[key][1] * 2
            delay = min(delay, MAX_BACK_OFF_SECONDS)
            self._until[key] = (now + delay * self.scale, delay)
            return now + delay * self.scale

    def next_try(self, key: tuple[str, str]) -> float | None:
        with self._lock:
            return self._until[key][0] if key in self._until else None


def ensure_image(
    container: dict[str, Any],
    pod_uid: str,
    *,
    on_node: bool,
    registry: Registry,
    credentials: list[tuple[str, str, str]],
    back_off: PullBackOff,
    now: float,
) -> PullOutcome:
    """The kubelet's EnsureImageExists for one container (see the module's docstring)."""
    image = container["image"]
    if not is_valid_reference(image):
        message = (
            f'Failed to apply default image tag "{image}": couldn\'t parse image reference "{image}": '
            "invalid reference format"
        )
        return PullOutcome("InvalidImageName", message, (("Warning", "InspectFailed", message),))
    policy = container.get("imagePullPolicy") or ("Always" if image.endswith(":latest") else "IfNotPresent")
    if policy == "Never" or (policy == "IfNotPresent" and on_node):
        if on_node:
            return PullOutcome()
        message = f'Container image "{image}" is not present with pull policy of Never'
        return PullOutcome("ErrImageNeverPull", message, (("Warning", "ErrImageNeverPull", message),))
    key = (pod_uid, image)
    if back_off.in_back_off(key, now):
        message = f'Back-off pulling image "{image}"'
        return PullOutcome("ImagePullBackOff", message, (("Normal", "BackOff", message),))
    pulling = ("Normal", "Pulling", f'Pulling image "{image}"')
    error = registry.pull_error(image, credentials)
    if error is not None:
        back_off.failed(key, now)
        failed = ("Warning", "Failed", f'Failed to pull image "{image}": {error}')
        return PullOutcome("ErrImagePull", error, (pulling, failed))
    return PullOutcome("", "", (pulling, ("Normal", "Pulled", f'Successfully pulled image "{image}"')))
