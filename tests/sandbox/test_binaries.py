"""Where the control plane binaries come from: KUBEBUILDER_ASSETS, the cache, or a build (once a machine)."""

from __future__ import annotations

import os
import ssl
import time
import urllib.request

import pytest
import yaml

from tpujob_sandbox import binaries
from tpujob_sandbox.binaries import ALL_BINARIES, BinariesUnavailable, find_binaries
from tpujob_sandbox.controlplane import ControlPlane


def fake_binaries(folder, names=ALL_BINARIES):
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = folder / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return folder


def refuse_to_build(cache, progress):
    raise AssertionError("must not build")


def test_kubebuilder_assets_come_first(tmp_path, monkeypatch):
    assets = fake_binaries(tmp_path / "assets", ("etcd", "kube-apiserver"))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setattr(binaries, "build_binaries", refuse_to_build)
    found = find_binaries(cache_dir=fake_binaries(tmp_path / "cache"))
    assert (found.origin, found.folder) == ("KUBEBUILDER_ASSETS", assets)
    assert not found.has("kube-scheduler")  # envtest folders have no scheduler: the sandbox runs without


def test_kubebuilder_assets_without_the_api_server_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(fake_binaries(tmp_path / "assets", ("etcd",))))
    with pytest.raises(BinariesUnavailable, match="lacks kube-apiserver"):
        find_binaries(cache_dir=tmp_path / "cache")


def test_a_complete_cache_is_used_without_building(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setattr(binaries, "build_binaries", refuse_to_build)
    assert find_binaries(cache_dir=fake_binaries(tmp_path / "cache")).origin == "cache"


def test_without_root_the_error_says_what_to_set_instead(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(BinariesUnavailable) as raised:
        find_binaries(cache_dir=tmp_path / "cache", progress=lambda _: None)
    message = str(raised.value)
    assert "needs root" in message
    assert "KUBEBUILDER_ASSETS" in message and "KUBECONFIG" in message


@pytest.mark.slow
@pytest.mark.timeout(1800)  # minutes of compiling, more on a loaded machine
@pytest.mark.skipif(
    os.environ.get("TPUJOB_TEST_COLD_BUILD") != "1",
    reason="rebuilds Kubernetes (about 5 minutes); set TPUJOB_TEST_COLD_BUILD=1 (the first session on a "
    "fresh machine builds anyway)",
)
def test_a_cold_start_builds_the_binaries_and_starts_a_control_plane(tmp_path, monkeypatch, record_property):
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    started = time.monotonic()
    built = find_binaries(cache_dir=tmp_path / "cache", progress=print)
    build_seconds = time.monotonic() - started
    assert built.origin == "built"
    assert all(built.has(name) for name in ALL_BINARIES)

    control_plane = ControlPlane(built, tmp_path / "state").start()
    try:
        total_seconds = time.monotonic() - started
        config = yaml.safe_load(control_plane.kubeconfig.read_text())
        request = urllib.request.Request(
            f"{control_plane.server}/readyz",
            headers={"Authorization": f"Bearer {config['users'][0]['user']['token']}"},
        )
        context = ssl.create_default_context(cafile=str(tmp_path / "state" / "pki" / "ca.crt"))
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            assert response.read() == b"ok"
    finally:
        control_plane.stop()
    record_property("cold_build_seconds", round(build_seconds))
    print(f"cold build {build_seconds:.0f} s, ready after {total_seconds:.0f} s")
