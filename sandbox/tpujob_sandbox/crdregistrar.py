"""The test bed's stand-in for kube-apiserver's CRD registration: an APIService for every group and version a
CRD in the 1.36 CRD server serves, so kube-apiserver's aggregator proxies it (aggregation.py says why).

kube-apiserver registers its own CRDs (crdregistration_controller.go: one APIService per served version,
removed with the CRD). This process watches the 1.36 server's CRDs through the aggregator and keeps the
labelled APIServices equal to them. It also serves the gate in front of the CRD API (crdgate.py). It runs
beside the control plane as one of its programs: `python -m tpujob_sandbox.crdregistrar --kubeconfig K ...`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from tpujob_sandbox.aggregation import (
    APIEXTENSIONS,
    CRD_GROUP_PRIORITY_MINIMUM,
    CRD_VERSION_PRIORITY,
    REGISTRAR_LABEL,
    api_service,
    served_versions,
)
from tpujob_sandbox.crdgate import Upstream, serve_gate, upstream_context

RETRY_SECONDS = 1.0
WATCH_SECONDS = 300
LOOPBACK = "127.0.0.1"
RECHECK_ANNOTATION = "tpujob-sandbox/recheck"


def established(crd: dict[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def wanted(crds: dict[str, dict[str, Any]]) -> set[tuple[str, str]]:
    """The (group, version) pairs to register: every served version of every Established CRD (registered
    earlier, the group is Available in the aggregator before the CRD server serves its objects: a create
    right after `kubectl wait --for condition=available` was refused, 404)."""
    return {pair for crd in crds.values() if established(crd) for pair in served_versions(crd)}


def ours_as_wanted(current: dict[str, Any], body: dict[str, Any]) -> bool:
    """The APIService is the registrar's (its label, no kube-apiserver `automanaged` label) and points where
    `body` does."""
    labels = current["metadata"].get("labels") or {}
    return bool(
        labels == body["metadata"]["labels"]
        and current["spec"].get("service") == body["spec"]["service"]
        and current["spec"].get("caBundle") == body["spec"]["caBundle"]
    )


def available(api_service: dict[str, Any]) -> bool:
    conditions = (api_service.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Available" and c.get("status") == "True" for c in conditions)


class Registrar:
    def __init__(self, api_client: k8s.ApiClient, port: int, ca_pem: bytes) -> None:
        self.api_client = api_client
        self.extensions = k8s.ApiextensionsV1Api(api_client)
        self.registration = k8s.ApiregistrationV1Api(api_client)
        self.port = port
        self.ca_pem = ca_pem

    def as_dict(self, obj: Any) -> dict[str, Any]:
        return self.api_client.sanitize_for_serialization(obj)  # type: ignore[no-any-return]

    def body(self, group: str, version: str) -> dict[str, Any]:
        return api_service(
            group,
            version,
            port=self.port,
            ca_pem=self.ca_pem,
            group_priority=CRD_GROUP_PRIORITY_MINIMUM,
            version_priority=CRD_VERSION_PRIORITY,
        )

    def register(self, pairs: set[tuple[str, str]], have: dict[str, dict[str, Any]]) -> None:
        for group, version in pairs:
            body = self.body(group, version)
            name = body["metadata"]["name"]
            current = have.get(name)
            if current is None:
                try:
                    self.registration.create_api_service(body)
                    log(f"registered {name}")
                    continue
                except ApiException as error:
                    if error.status != 409:
                        raise
                current = self.as_dict(self.registration.read_api_service(name))
            if not ours_as_wanted(current, body):
                # kube-apiserver's own CRD registration may have written it first, as a local APIService.
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                self.registration.replace_api_service(name, body)
                log(f"pointed {name} at the CRD server")

    def apiservices(self) -> dict[str, dict[str, Any]]:
        return {item.metadata.name: self.as_dict(item) for item in self.registration.list_api_service().items}

    def sync(self, crds: dict[str, dict[str, Any]]) -> None:
        have = self.apiservices()
        want = wanted(crds)
        self.register(want, have)
        names = {f"{version}.{group}" for group, version in want}
        for name in have.keys() - names:
            if REGISTRAR_LABEL in (have[name]["metadata"].get("labels") or {}):
                self.registration.delete_api_service(name)
                log(f"unregistered {name}")
        self.recheck_once_established(crds, have)

    def recheck_once_established(
        self, crds: dict[str, dict[str, Any]], have: dict[str, dict[str, Any]]
    ) -> None:
        """An APIService registered before its CRD was served failed the aggregator's discovery check; a
        change to it makes the aggregator check again now rather than at its next resync."""
        for crd in crds.values():
            if not established(crd):
                continue
            for group, version in served_versions(crd):
                current = have.get(f"{version}.{group}")
                ours = current is not None and REGISTRAR_LABEL in (current["metadata"].get("labels") or {})
                if ours and current is not None and not available(current):
                    self.registration.patch_api_service(
                        current["metadata"]["name"],
                        {"metadata": {"annotations": {RECHECK_ANNOTATION: str(time.time())}}},
                    )

    def run(self) -> None:
        """List, sync, then watch and sync on every change; start over after any error."""
        while True:
            try:
                listed = self.extensions.list_custom_resource_definition()
                crds = {item.metadata.name: self.as_dict(item) for item in listed.items}
                self.sync(crds)
                stream = k8s_watch.Watch().stream(
                    self.extensions.list_custom_resource_definition,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                )
                for event in stream:
                    crd = self.as_dict(event["object"])
                    if event["type"] == "DELETED":
                        crds.pop(crd["metadata"]["name"], None)
                    else:
                        crds[crd["metadata"]["name"]] = crd
                    self.sync(crds)
            except (ApiException, OSError, ValueError) as error:  # the next round lists again
                reason = getattr(error, "reason", None) or error
                log(f"{type(error).__name__} ({reason}); listing again in {RETRY_SECONDS} s")
                time.sleep(RETRY_SECONDS)  # a retry pause in a daemon loop, not a test's wait


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} crd-registrar: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True, help="the CRD server's port")
    parser.add_argument("--ca", type=Path, required=True, help="the CA that signed the CRD server's cert")
    parser.add_argument("--gate-port", type=int, required=True, help="the CRD API's gate (crdgate.py)")
    parser.add_argument("--cert", type=Path, required=True, help="the gate's serving cert")
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--front-proxy-cert", type=Path, required=True, help="the gate's client cert")
    parser.add_argument("--front-proxy-key", type=Path, required=True)
    args = parser.parse_args(argv)
    api_client = k8s_config.new_client_from_config(config_file=str(args.kubeconfig))
    registrar = Registrar(api_client, args.port, args.ca.read_bytes())
    context = upstream_context(args.ca, args.front_proxy_cert, args.front_proxy_key)
    serve_gate(args.gate_port, args.cert, args.key, Upstream(LOOPBACK, args.port, context))
    log(f"watching {'/'.join(APIEXTENSIONS)} CRDs; the CRD server is on port {args.port}")
    registrar.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
