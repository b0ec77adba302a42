"""How Kubernetes 1.36's CRD server joins the 1.20 API server at one address: pure builders of its flags and
of the objects that register it in kube-apiserver's aggregator.

kube-apiserver's aggregator (kube-aggregator) proxies an API group and version to a server behind an
APIService; this is how metrics-server or any extension API server is served at the cluster's address.
The CRD server here is such a server:
- kube-apiserver gets a front-proxy client cert (`--proxy-client-cert-file`), and the CRD server trusts the
  user and groups that cert's requests carry in headers (`--requestheader-*`): the aggregator has already
  authenticated the caller. Bearer tokens sent to the CRD server directly are checked with a TokenReview,
  and every request is authorized with a SubjectAccessReview, against kube-apiserver (delegated auth).
- kube-apiserver reaches a backend through a Service. An ExternalName Service names `localhost`: the
  aggregator's cluster resolver (k8s.io/apiserver pkg/util/proxy ResolveCluster) turns an ExternalName into
  https://<externalName>:<port>, and the TLS server name it checks is `<service>.<namespace>.svc`.
- The APIService `v1.apiextensions.k8s.io` is re-pointed from kube-apiserver's own (in-process) CRD server
  to the 1.36 one, so `kubectl apply` of a CRD at the cluster's address lands there; kube-apiserver's
  autoregister controller writes that APIService back only when kube-apiserver restarts (its `onstart`
  label), which the test bed never does.
- kube-apiserver registers an APIService for each CRD group and version it serves itself
  (crdregistration_controller.go); it cannot see the 1.36 server's CRDs, so the test bed's registrar does
  the same for them (crdregistrar.py), with the same priorities.

On GKE the CRD server runs inside kube-apiserver: this hop is the test bed's, not the users'.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from tpujob_sandbox.pki import FRONT_PROXY_CLIENT, Pki

NAMESPACE = "kube-system"
SERVICE = "tpujob-crd-server"
# The CRD API goes through the registrar's gate (crdgate.py), behind a Service of its own.
GATE_SERVICE = "tpujob-crd-gate"
# The names the aggregator checks in the serving certs.
SERVICE_DNS_NAMES = (f"{SERVICE}.{NAMESPACE}.svc", f"{GATE_SERVICE}.{NAMESPACE}.svc")
APIEXTENSIONS = ("apiextensions.k8s.io", "v1")
# The label on the APIServices the registrar owns (it deletes only those).
REGISTRAR_LABEL = "tpujob-sandbox/crd-server"
# What kube-apiserver gives every CRD's APIService (k8s.io/kubernetes pkg/controlplane/controller/
# crdregistration/crdregistration_controller.go: "CRDs should have relatively low priority").
CRD_GROUP_PRIORITY_MINIMUM = 1000
CRD_VERSION_PRIORITY = 100
# Admission plugins that read APIs kube-apiserver 1.20 does not serve (admissionregistration.k8s.io/v1's
# ValidatingAdmissionPolicy, MutatingAdmissionPolicy) or webhooks nobody registers here. NamespaceLifecycle
# stays: it reads Namespaces from kube-apiserver, so a TPUJob in a missing namespace is refused as on GKE; so
# do validating webhooks, whose configurations it reads from kube-apiserver too.
DISABLED_ADMISSION = (
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
)


# kube-apiserver's own CRD API, turned off: the aggregator then describes CRDs in its OpenAPI document with
# the 1.36 server's schema (it puts a local group's first, and kubectl validates a CRD against it: 1.20's
# knows no x-kubernetes-validations), and no `onstart` APIService of its own competes with the 1.36 one.
KUBE_APISERVER_RUNTIME_CONFIG = "apiextensions.k8s.io/v1=false,apiextensions.k8s.io/v1beta1=false"
# kube-apiserver's in-process CRD informers and controllers list CRDs through the aggregator (the gate shows
# them none: crdgate.py), so they sync only once the CRD API is registered: until then, its readiness is
# checked without them, and in full after.
UNTIL_REGISTERED = (
    "?exclude=poststarthook/crd-informer-synced&exclude=poststarthook/start-apiextensions-controllers"
)
# What kube-apiserver gives apiextensions.k8s.io/v1 (cmd/kube-apiserver/app/aggregator.go,
# apiVersionPriorities).
APIEXTENSIONS_GROUP_PRIORITY = 16400
APIEXTENSIONS_VERSION_PRIORITY = 15


def kube_apiserver_flags(pki: Pki) -> list[str]:
    """What kube-apiserver needs to proxy to the CRD server: the client cert its front proxy presents; and its
    own CRD API off."""
    return [
        f"--proxy-client-cert-file={pki.front_proxy_cert}",
        f"--proxy-client-key-file={pki.front_proxy_key}",
        f"--runtime-config={KUBE_APISERVER_RUNTIME_CONFIG}",
    ]


def crd_server_args(
    binary: Path,
    *,
    etcd_port: int,
    port: int,
    pki: Pki,
    kubeconfig: Path,
    cert_dir: Path,
    loopback: str,
) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://{loopback}:{etcd_port}",
        f"--bind-address={loopback}",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        f"--tls-cert-file={pki.crd_server_cert}",
        f"--tls-private-key-file={pki.crd_server_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--requestheader-client-ca-file={pki.ca_cert}",
        f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        # The core API (namespaces, TokenReview, SubjectAccessReview) is kube-apiserver's.
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        # The front-proxy settings are the flags above, not kube-system's extension-apiserver-authentication.
        "--authentication-skip-lookup",
        f"--disable-admission-plugins={','.join(DISABLED_ADMISSION)}",
        # Priority and fairness reads flowcontrol.apiserver.k8s.io/v1, which kube-apiserver 1.20 serves only
        # as v1beta1: the server would never be ready. Every request passes kube-apiserver's own limits first
        # (the aggregator in front: its max-in-flight limits, controlplane.apiserver_args), as on GKE, where
        # this server runs in kube-apiserver's process.
        "--enable-priority-and-fairness=false",
        "--v=1",
    ]


def external_name_service(name: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"port": port}]},
    }


def api_service(
    group: str,
    version: str,
    *,
    port: int,
    ca_pem: bytes,
    group_priority: int,
    version_priority: int,
    registrar: bool = True,
    service: str = SERVICE,
) -> dict[str, Any]:
    """An APIService that sends `/apis/<group>/<version>` to the CRD server; `registrar`: one the registrar
    owns (a CRD's group), which it deletes with the CRD."""
    return {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": f"{version}.{group}", "labels": {REGISTRAR_LABEL: "true"} if registrar else {}},
        "spec": {
            "group": group,
            "version": version,
            "service": {"namespace": NAMESPACE, "name": service, "port": port},
            "caBundle": base64.b64encode(ca_pem).decode(),
            "groupPriorityMinimum": group_priority,
            "versionPriority": version_priority,
        },
    }


def served_versions(crd: dict[str, Any]) -> list[tuple[str, str]]:
    """(group, version) of every version a CRD serves."""
    spec = crd.get("spec") or {}
    return [(spec["group"], v["name"]) for v in spec.get("versions") or [] if v.get("served")]
