"""Keys and certificates for the control plane: a CA, the API server's serving cert, the SA signing key; for
the aggregation of the CRD server, the front proxy's client cert and the CRD server's serving cert."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Pki:
    folder: Path

    @property
    def ca_cert(self) -> Path:
        return self.folder / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.folder / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.folder / "apiserver.key"

    @property
    def front_proxy_cert(self) -> Path:
        """The client cert kube-apiserver's aggregator shows the CRD server (--proxy-client-cert-file)."""
        return self.folder / "front-proxy-client.crt"

    @property
    def front_proxy_key(self) -> Path:
        return self.folder / "front-proxy-client.key"

    @property
    def crd_server_cert(self) -> Path:
        return self.folder / "crd-server.crt"

    @property
    def crd_server_key(self) -> Path:
        return self.folder / "crd-server.key"

    @property
    def service_account_key(self) -> Path:
        return self.folder / "sa.key"

    @property
    def service_account_public_key(self) -> Path:
        return self.folder / "sa.pub"


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str,
    key: rsa.RSAPrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: rsa.RSAPrivateKey,
    *,
    is_ca: bool,
    hosts: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if hosts:
        names: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts if not h[0].isdigit()]
        names += [x509.IPAddress(ipaddress.ip_address(h)) for h in hosts if h[0].isdigit()]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def ensure_pki(folder: Path, hosts: tuple[str, ...]) -> Pki:
    """Create the keys and certificates once per state folder; later starts reuse them."""
    pki = Pki(folder)
    if pki.service_account_public_key.exists():
        return pki
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _new_key()
    ca = _certificate("tpujob-sandbox-ca", ca_key, None, ca_key, is_ca=True)
    serving_key = _new_key()
    serving = _certificate("kube-apiserver", serving_key, ca, ca_key, is_ca=False, hosts=hosts)
    sa_key = _new_key()
    pki.ca_key.write_bytes(_key_pem(ca_key))
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(_key_pem(serving_key))
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    pki.service_account_key.write_bytes(_key_pem(sa_key))
    # Written last: its presence marks a complete set.
    pki.service_account_public_key.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


# The CN kube-apiserver's front proxy presents, and the only one the servers behind it accept
# (--requestheader-allowed-names), as kubeadm names it.
FRONT_PROXY_CLIENT = "front-proxy-client"


def ensure_aggregation_pki(pki: Pki, crd_server_hosts: tuple[str, ...]) -> Pki:
    """The front proxy's client cert and the CRD server's serving cert, signed by the sandbox's CA; made anew
    at every start (they name the hosts of that start's design)."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, rsa.RSAPrivateKey)
    ca = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
    for subject, cert_path, key_path, hosts in (
        (FRONT_PROXY_CLIENT, pki.front_proxy_cert, pki.front_proxy_key, ()),
        ("crd-server", pki.crd_server_cert, pki.crd_server_key, crd_server_hosts),
    ):
        key = _new_key()
        cert = _certificate(subject, key, ca, ca_key, is_ca=False, hosts=hosts)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_key_pem(key))
    return pki
