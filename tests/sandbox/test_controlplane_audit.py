"""The test bed's optional audit log: off unless asked for; when on, one resource or some users' requests at
Metadata level."""

from pathlib import Path

from tpujob_sandbox.controlplane import Ports, apiserver_args, audit_policy
from tpujob_sandbox.pki import Pki

PKI = Pki(Path("/pki"))


def test_the_policy_logs_every_request_to_one_resource_without_bodies_and_nothing_else():
    rules = audit_policy("tpujob.dev", "tpujobs")["rules"]
    assert rules[0] == {"level": "Metadata", "resources": [{"group": "tpujob.dev", "resources": ["tpujobs"]}]}
    assert rules[-1] == {"level": "None"}  # the catch-all: every other request unlogged


def test_the_policy_can_log_every_request_of_some_users_instead():
    rules = audit_policy(None, None, ("system:serviceaccount:tpujob-system:tpujob-operator",))["rules"]
    assert rules == [
        {"level": "Metadata", "users": ["system:serviceaccount:tpujob-system:tpujob-operator"]},
        {"level": "None"},
    ]


def test_the_api_server_writes_an_audit_log_only_with_a_policy(tmp_path):
    ports = Ports(*range(1, 10))
    plain = apiserver_args(Path("kube-apiserver"), tmp_path, PKI, ports)
    audited = apiserver_args(Path("kube-apiserver"), tmp_path, PKI, ports, tmp_path / "policy.yaml")
    assert not [a for a in plain if a.startswith("--audit")]
    assert f"--audit-policy-file={tmp_path / 'policy.yaml'}" in audited
    assert f"--audit-log-path={tmp_path / 'logs' / 'audit.log'}" in audited
