"""The simulated kubelet's checks before a container starts: image pulls (kubelet image_manager.go),
container config from Secrets and ConfigMaps (kubelet_pods.go), volumes that cannot mount. Pure parts as
tables; the rest against the real API server with pods bound to a simulated TPU node."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client as k8s

from tests.sandbox.test_kubelet_sim import node, pod_manifest, wait_phase  # noqa: F401  (node: a fixture)
from tpujob_sandbox import wait_for
from tpujob_sandbox.kubelet.config import (
    ContainerConfigError,
    downward_api_files,
    missing_volume,
    referenced_env,
)
from tpujob_sandbox.kubelet.images import (
    PullBackOff,
    Registry,
    docker_config_credentials,
    ensure_image,
    is_valid_reference,
    normalized,
)
from tpujob_sandbox.kubelet.startup import StartChecks

PRIVATE = "us-docker.pkg.dev/team-project/models/trainer:v3"


@pytest.mark.parametrize(
    ("image", "valid"),
    [
        ("trainer", True),
        ("us-docker.pkg.dev/p/r/trainer:v1", True),
        ("localhost:5000/a/b@sha256:" + "a" * 64, True),
        ("Trainer:v1", False),  # uppercase repository
        ("trainer:", False),
        ("trainer v1", False),
    ],
)
def test_image_references_parse_as_distribution_reference_parses_them(image, valid):
    assert is_valid_reference(image) is valid


def test_short_names_normalize_as_containerd_names_them():
    assert normalized("busybox") == "docker.io/library/busybox:latest"
    assert normalized("team/trainer:v1") == "docker.io/team/trainer:v1"
    assert normalized("us-docker.pkg.dev/p/r/t") == "us-docker.pkg.dev/p/r/t:latest"


def pull(
    registry, image="registry.example/a/trainer:v1", *, credentials=(), back_off=None, now=0.0, **container
):
    back_off = back_off or PullBackOff()
    return ensure_image(
        {"name": "trainer", "image": image, "imagePullPolicy": "IfNotPresent", **container},
        "uid-1",
        on_node=False,
        registry=registry,
        credentials=list(credentials),
        back_off=back_off,
        now=now,
    )


def test_a_missing_image_fails_with_containerds_not_found_then_backs_off_10_20_40_s():
    registry, back_off = Registry(), PullBackOff()
    registry.missing("registry.example/a/trainer:v1")
    first = pull(registry, back_off=back_off, now=0.0)
    assert first.reason == "ErrImagePull"
    image = "registry.example/a/trainer:v1"
    assert first.message == (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
        f'failed to resolve reference "{image}": {image}: not found'
    )
    assert (
        "Warning",
        "Failed",
        f'Failed to pull image "registry.example/a/trainer:v1": {first.message}',
    ) in (first.events)
    waiting = pull(registry, back_off=back_off, now=9.9)
    assert (waiting.reason, waiting.message) == (
        "ImagePullBackOff",
        'Back-off pulling image "registry.example/a/trainer:v1"',
    )
    assert pull(registry, back_off=back_off, now=10.0).reason == "ErrImagePull"  # pulled again: 20 s now
    assert pull(registry, back_off=back_off, now=29.9).reason == "ImagePullBackOff"
    assert pull(registry, back_off=back_off, now=30.0).reason == "ErrImagePull"
    assert back_off.next_try(("uid-1", "registry.example/a/trainer:v1")) == 70.0


def test_the_back_off_stops_at_300_s():
    back_off = PullBackOff()
    for now in range(10):
        back_off.failed(("uid", "image"), float(now * 1000))
    assert back_off.next_try(("uid", "image")) == 9000.0 + 300.0


def docker_config(host, username, password):
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {
        ".dockerconfigjson": base64.b64encode(json.dumps({"auths": {host: {"auth": auth}}}).encode()).decode()
    }


def test_a_private_registry_wants_the_pull_secrets_credentials():
    registry = Registry()
    registry.private("us-docker.pkg.dev", "_json_key", "k3y")
    refused = pull(registry, PRIVATE)
    assert refused.reason == "ErrImagePull"
    assert refused.message.endswith(
        "pulling from host us-docker.pkg.dev failed with status code [manifests v3]: 401 Unauthorized"
    )
    credentials = docker_config_credentials(docker_config("https://us-docker.pkg.dev", "_json_key", "k3y"))
    assert pull(registry, PRIVATE, credentials=credentials).reason == ""
    wrong = docker_config_credentials(docker_config("us-docker.pkg.dev", "_json_key", "other"))
    assert pull(registry, PRIVATE, credentials=wrong).reason == "ErrImagePull"


def test_a_cleared_registry_has_every_image_and_wants_no_credentials():
    registry = Registry()
    registry.private("us-docker.pkg.dev", "_json_key", "k3y")
    registry.missing("registry.example/a/trainer:v1")
    registry.clear()
    assert pull(registry, PRIVATE).reason == ""
    assert pull(registry).reason == ""


def test_invalid_names_and_never_pull_say_so_in_the_kubelets_words():
    invalid = pull(Registry(), "Team/Trainer:v1")
    assert (invalid.reason, invalid.message) == (
        "InvalidImageName",
        'Failed to apply default image tag "Team/Trainer:v1": couldn\'t parse image reference '
        '"Team/Trainer:v1": invalid reference format',
    )
    never = pull(Registry(), imagePullPolicy="Never")
    assert (never.reason, never.message) == (
        "ErrImageNeverPull",
        'Container image "registry.example/a/trainer:v1" is not present with pull policy of Never',
    )


OBJECTS = {("Secret", "hf"): {"token": "hf_1"}, ("ConfigMap", "cfg"): {"LR": "0.1", "BATCH": "8"}}


def read(kind, name):
    return OBJECTS.get((kind, name))


def env_of(*env, env_from=()):
    pod = {"metadata": {"namespace": "team"}, "spec": {}}
    return referenced_env(pod, {"name": "trainer", "env": list(env), "envFrom": list(env_from)}, read)


def secret_ref(name, key, **extra):
    return {"name": "V", "valueFrom": {"secretKeyRef": {"name": name, "key": key, **extra}}}


def test_env_from_secrets_and_config_maps_resolves_as_the_kubelet_does():
    assert env_of(secret_ref("hf", "token")) == {"V": "hf_1"}
    assert env_of(env_from=[{"configMapRef": {"name": "cfg"}, "prefix": "APP_"}]) == {
        "APP_LR": "0.1",
        "APP_BATCH": "8",
    }
    assert (
        env_of(
            secret_ref("gone", "token", optional=True),
            env_from=[{"secretRef": {"name": "x", "optional": True}}],
        )
        == {}
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (secret_ref("gone", "token"), 'secret "gone" not found'),
        (secret_ref("hf", "nope"), "couldn't find key nope in Secret team/hf"),
        (
            {"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "EPOCHS"}}},
            "couldn't find key EPOCHS in ConfigMap team/cfg",
        ),
    ],
)
def test_a_missing_object_or_key_is_a_container_config_error(entry, message):
    with pytest.raises(ContainerConfigError, match=message):
        env_of(entry)


def test_a_secret_volume_that_cannot_mount_names_the_volume_and_the_secret():
    pod = {
        "spec": {
            "volumes": [{"name": "creds", "secret": {"secretName": "gone"}}, {"name": "x", "emptyDir": {}}]
        }
    }
    assert missing_volume(pod, read) == (
        "creds",
        'MountVolume.SetUp failed for volume "creds" : secret "gone" not found',
    )
    pod["spec"]["volumes"][0]["secret"]["optional"] = True
    assert missing_volume(pod, read) is None


# --- against the real API server -------------------------------------------------------------------------


def waiting(core, namespace, name, reason, timeout=20):
    def shown():
        statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return state if state is not None and state.reason == reason else None

    return wait_for(shown, timeout=timeout, what=f"pod {name} waiting with {reason}")


def kubelet_events(core, namespace, name):
    return [
        (e.type, e.reason, e.message)
        for e in core.list_namespaced_event(namespace).items
        if e.involved_object.name == name and e.source.component == "kubelet"
    ]


def test_a_private_image_pulls_only_with_its_pull_secret(core, kubelet, namespace, node):  # noqa: F811
    kubelet.registry.private("us-docker.pkg.dev", "_json_key", "k3y")
    core.create_namespaced_pod(namespace, pod_manifest("no-secret", node, PRIVATE))
    state = waiting(core, namespace, "no-secret", "ErrImagePull")
    assert "401 Unauthorized" in state.message
    assert ("Warning", "Failed", f'Failed to pull image "{PRIVATE}": {state.message}') in kubelet_events(
        core, namespace, "no-secret"
    )
    secret = k8s.V1Secret(
        metadata=k8s.V1ObjectMeta(name="pull"),
        type="kubernetes.io/dockerconfigjson",
        data=docker_config("us-docker.pkg.dev", "_json_key", "k3y"),
    )
    core.create_namespaced_secret(namespace, secret)
    manifest = pod_manifest("with-secret", node, PRIVATE)
    manifest["spec"]["imagePullSecrets"] = [{"name": "pull"}]
    core.create_namespaced_pod(namespace, manifest)
    wait_phase(core, namespace, "with-secret", "Running")


def test_a_missing_secret_env_is_create_container_config_error_until_the_secret_exists(
    core,
    kubelet,
    namespace,
    node,  # noqa: F811
):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "token"}}}]
    core.create_namespaced_pod(namespace, pod_manifest("env", node, env=env))
    state = waiting(core, namespace, "env", "CreateContainerConfigError")
    assert state.message == 'secret "later" not found'
    assert core.read_namespaced_pod("env", namespace).status.phase == "Pending"
    core.create_namespaced_secret(
        namespace, k8s.V1Secret(metadata=k8s.V1ObjectMeta(name="later"), string_data={"token": "t"})
    )
    wait_phase(core, namespace, "env", "Running", timeout=30)  # the kubelet's next sync, about 10 s later


def test_a_secret_volume_that_cannot_mount_keeps_the_pod_creating_with_a_failed_mount(
    core,
    kubelet,
    namespace,
    node,  # noqa: F811
):
    manifest = pod_manifest("vol", node, volumeMounts=[{"name": "creds", "mountPath": "/creds"}])
    manifest["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "gone"}}]
    core.create_namespaced_pod(namespace, manifest)
    waiting(core, namespace, "vol", "ContainerCreating")
    wait_for(
        lambda: (
            (
                "Warning",
                "FailedMount",
                'MountVolume.SetUp failed for volume "creds" : secret "gone" not found',
            )
            in kubelet_events(core, namespace, "vol")
        ),
        timeout=10,
        what="the FailedMount event",
    )


def test_a_downward_api_volume_is_written_from_the_pods_metadata_and_rewritten_when_it_changes(tmp_path):
    """The files a downwardAPI volume's items name (one annotation, the labels, the name), and the rewrite on
    the pod's update: the way a kept worker learns its new attempt (restartStrategy RecreateSlice)."""
    volume = {
        "name": "info",
        "downwardAPI": {
            "items": [
                {
                    "path": "attempt",
                    "fieldRef": {"fieldPath": "metadata.annotations['tpujob.dev/restart-attempt']"},
                },
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
            ]
        },
    }
    pod = {
        "metadata": {
            "namespace": "ml",
            "name": "w0",
            "labels": {"b": "2", "a": "1"},
            "annotations": {"tpujob.dev/restart-attempt": "0"},
        },
        "spec": {"volumes": [volume], "containers": []},
    }
    assert downward_api_files(volume, pod) == {"attempt": "0", "labels": 'a="1"\nb="2"', "name": "w0"}
    assert downward_api_files({"name": "x", "emptyDir": {}}, pod) is None
    checks = StartChecks(None, tmp_path, Registry(), PullBackOff())  # type: ignore[arg-type]
    pod["metadata"]["annotations"]["tpujob.dev/restart-attempt"] = "3"
    checks.refresh_downward_api(pod)
    assert (tmp_path / "volumes" / "ml_w0" / "info" / "attempt").read_text() == "3"
