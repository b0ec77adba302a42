"""Pure rendering: node pools, pods and the Service, table-tested without a cluster."""

import dataclasses
import json

import pytest
from google.cloud import container_v1

from tests.manifests import base_job
from tpujob.api import constants as c
from tpujob.api import parse_tpujob
from tpujob.render import Cluster, render_plan, worker_env
from tpujob.render.naming import MAX_POOL_NAME

CLUSTER = Cluster(project="p", location="us-east5", cluster="c", zone="us-east5-b")


TPU7X_2X2X2 = {"type": "tpu7x", "topology": "2x2x2"}
JAX = {"image": "registry.example/jax-trainer:1"}  # TensorFlow does not run on tpu7x


def job(name="train", uid="1234", **spec):
    manifest = base_job(name, **spec)
    manifest["metadata"]["uid"] = uid
    return parse_tpujob(manifest)


def env_of(pod):
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def pods_of(plan):
    return [r for r in plan.resources if r["kind"] == "Pod"]


# (tpu spec) -> (pools, pods per pool, chips per pod, machine type, multi-host placement topology or None)
SHAPES = [
    ({"type": "v5e", "topology": "2x2"}, 1, 1, 4, "ct5lp-hightpu-4t", None),
    ({"type": "v5e", "topology": "1x1"}, 1, 1, 1, "ct5lp-hightpu-1t", None),
    ({"type": "v5e", "topology": "2x4"}, 1, 1, 8, "ct5lp-hightpu-8t", None),
    (
        {"type": "v5e", "topology": "2x4", "machineType": "ct5lp-hightpu-4t"},
        1,
        2,
        4,
        "ct5lp-hightpu-4t",
        "2x4",
    ),
    ({"type": "v5p", "topology": "2x2x4"}, 1, 4, 4, "ct5p-hightpu-4t", "2x2x4"),
    ({"type": "v4", "topology": "2x2x1"}, 1, 1, 4, "ct4p-hightpu-4t", None),
    ({"type": "v6e", "topology": "4x4", "slices": 2}, 2, 4, 4, "ct6e-standard-4t", "4x4"),
    ({"type": "v6e", "topology": "16x16", "slices": 3}, 3, 64, 4, "ct6e-standard-4t", "16x16"),
]


@pytest.mark.parametrize(("tpu_spec", "n_pools", "hosts", "chips", "machine", "placement"), SHAPES)
def test_pools_and_pods_follow_the_slice_shape(tpu_spec, n_pools, hosts, chips, machine, placement):
    plan = render_plan(job(tpu=tpu_spec), CLUSTER)
    assert len(plan.node_pools) == n_pools
    for pool in plan.node_pools:
        assert pool["initialNodeCount"] == hosts
        assert pool["config"]["machineType"] == machine
        assert pool["locations"] == ["us-east5-b"]
        # Release-channel clusters (GKE's default) refuse a pool with auto-upgrade off.
        assert pool["management"] == {"autoUpgrade": True, "autoRepair": True}
        # Shielded from node auto-upgrades while it exists: its own exclusion until end of support.
        assert pool["maintenancePolicy"] == {"exclusionUntilEndOfSupport": {"enabled": True}}
        if placement:
            assert pool["placementPolicy"] == {"type": "COMPACT", "tpuTopology": placement}
        else:
            assert "placementPolicy" not in pool  # never a topology on a single-host pool
    pods = pods_of(plan)
    assert len(pods) == n_pools * hosts
    for pod in pods:
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["requests"][c.TPU_RESOURCE] == resources["limits"][c.TPU_RESOURCE] == str(chips)


def test_node_pools_are_valid_gke_rest_json():
    """The real client's NodePool type reads every field: camelCase names as GKE's REST API has them."""
    for tpu_spec, *_ in SHAPES:
        for pool in render_plan(job(tpu=tpu_spec, capacity={"mode": "spot"}), CLUSTER).node_pools:
            parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
            assert parsed.name == pool["name"]
            assert parsed.config.spot is True
            assert parsed.initial_node_count == pool["initialNodeCount"]


def test_reservation_affinity_and_ownership_labels():
    plan = render_plan(job(capacity={"mode": "reservation", "reservation": "res-1"}), CLUSTER)
    (pool,) = plan.node_pools
    parsed = container_v1.NodePool.from_json(json.dumps(pool))
    affinity = parsed.config.reservation_affinity
    assert affinity.consume_reservation_type == container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    assert affinity.key == "compute.googleapis.com/reservation-name"
    assert list(affinity.values) == ["res-1"]
    assert pool["config"]["labels"][c.POOL_LABEL_JOB_UID] == "1234"
    assert pool["config"]["labels"][c.POOL_LABEL_MANAGED_BY] == c.MANAGED_BY
    assert "spot" not in pool["config"]


def test_pool_names_are_gke_valid_stable_and_distinct():
    long_job = job(name="a" * 48, tpu={"type": "v6e", "topology": "4x4", "slices": 4})
    names = [p["name"] for p in render_plan(long_job, CLUSTER).node_pools]
    assert all(len(n) <= MAX_POOL_NAME for n in names)
    assert len(set(names)) == 4
    assert names == [p["name"] for p in render_plan(long_job, CLUSTER).node_pools]
    other_uid = [
        p["name"]
        for p in render_plan(
            job(name="a" * 48, uid="99", tpu=long_job.spec.tpu.model_dump()), CLUSTER
        ).node_pools
    ]
    assert set(names).isdisjoint(other_uid)


def test_pod_selectors_tolerations_and_identity():
    plan = render_plan(job(tpu={"type": "v5p", "topology": "2x2x4"}, capacity={"mode": "spot"}), CLUSTER)
    pool_name = plan.node_pools[0]["name"]
    pods = pods_of(plan)
    for worker, pod in enumerate(pods):
        spec = pod["spec"]
        assert spec["nodeSelector"] == {
            c.NODE_LABEL_ACCELERATOR: "tpu-v5p-slice",
            c.NODE_LABEL_TOPOLOGY: "2x2x4",
            c.NODE_LABEL_NODEPOOL: pool_name,
            c.NODE_LABEL_SPOT: "true",
        }
        assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert {
            "key": c.SPOT_TAINT_KEY,
            "operator": "Equal",
            "value": "true",
            "effect": "NoSchedule",
        } in spec["tolerations"]
        assert spec["hostname"] == f"train-s0-w{worker}"
        assert spec["subdomain"] == "train"
        assert spec["restartPolicy"] == "Never"
        env = env_of(pod)
        assert env["TPU_WORKER_ID"] == str(worker)
        assert env["TPU_WORKER_HOSTNAMES"].split(",") == [f"train-s0-w{w}.train" for w in range(4)]
        assert not any(k.startswith("MEGASCALE") for k in env)
        labels = pod["metadata"]["labels"]
        assert (labels[c.LABEL_SLICE], labels[c.LABEL_WORKER], labels[c.LABEL_ATTEMPT]) == (
            "0",
            str(worker),
            "0",
        )
        assert pod["metadata"]["ownerReferences"][0]["uid"] == "1234"
        security = spec["containers"][0]["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert "privileged" not in security


def test_multislice_env_and_ports():
    plan = render_plan(job(tpu={"type": "v6e", "topology": "4x4", "slices": 2}), CLUSTER)
    pods = pods_of(plan)
    assert len(pods) == 8
    for pod in pods:
        env = env_of(pod)
        slice_id = int(pod["metadata"]["labels"][c.LABEL_SLICE])
        assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "train-s0-w0.train"
        assert env["MEGASCALE_NUM_SLICES"] == "2"
        assert env["MEGASCALE_SLICE_ID"] == str(slice_id)
        assert env["MEGASCALE_PORT"] == str(c.PORT_MEGASCALE)
        assert env["TPU_WORKER_HOSTNAMES"].split(",")[0] == f"train-s{slice_id}-w0.train"
        ports = {p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert {c.PORT_TPU_ICI, c.PORT_TF_WORKER, c.PORT_MEGASCALE} <= ports
        assert pod["spec"]["nodeSelector"][c.NODE_LABEL_NODEPOOL] == plan.node_pools[slice_id]["name"]


def test_existing_policy_renders_no_pools_and_no_pool_pin():
    plan = render_plan(job(nodePool={"policy": "existing"}), CLUSTER)
    assert plan.node_pools == []
    (pod,) = pods_of(plan)
    assert c.NODE_LABEL_NODEPOOL not in pod["spec"]["nodeSelector"]


def test_each_pool_is_tainted_for_its_own_jobs_pods_only():
    """Only the job's own pods tolerate its pools' taint; a job on existing pools tolerates no job's taint."""
    mine = render_plan(job(uid="uid-a", tpu={"type": "v5p", "topology": "2x2x4", "slices": 2}), CLUSTER)
    own = {"key": c.POOL_TAINT_KEY, "value": "uid-a", "effect": "NO_SCHEDULE"}
    assert [pool["config"]["taints"] for pool in mine.node_pools] == [[own], [own]]
    toleration = {"key": c.POOL_TAINT_KEY, "operator": "Equal", "value": "uid-a", "effect": "NoSchedule"}
    assert all(toleration in pod["spec"]["tolerations"] for pod in pods_of(mine))
    theirs = render_plan(job(uid="uid-b", nodePool={"policy": "existing"}), CLUSTER)
    (pod,) = pods_of(theirs)
    assert not [t for t in pod["spec"]["tolerations"] if t["key"].startswith(f"{c.GROUP}/")]


def test_headless_service_publishes_not_ready_workers():
    plan = render_plan(job(), CLUSTER)
    service = plan.resources[0]
    assert service["kind"] == "Service"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {c.LABEL_JOB_NAME: "train"}


def test_user_settings_reach_the_container():
    manifest_job = job(
        trainer={
            "image": "img:1",
            "command": ["python", "-m", "x"],
            "args": ["--a"],
            "env": [{"name": "FOO", "value": "bar"}],
            "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
            "checkpointDir": "gs://b/ckpt",
            "serviceAccountName": "trainer",
            "hostNetwork": True,
        }
    )
    (pod,) = pods_of(render_plan(manifest_job, CLUSTER))
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "x"]
    assert container["args"] == ["--a"]
    assert env_of(pod)["FOO"] == "bar"
    assert env_of(pod)["TPUJOB_CHECKPOINT_DIR"] == "gs://b/ckpt"
    assert container["resources"]["requests"] == {"cpu": "4", c.TPU_RESOURCE: "4"}
    assert container["resources"]["limits"] == {"memory": "8Gi", c.TPU_RESOURCE: "4"}
    assert pod["spec"]["serviceAccountName"] == "trainer"
    assert pod["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"checkpointDir": "gs://b/ckpt/"}, "gs://b/ckpt/export"),  # the default: under checkpointDir
        ({"checkpointDir": "gs://b/ckpt", "exportDir": "gs://b/models/1"}, "gs://b/models/1"),
        ({"exportDir": "/mnt/models"}, "/mnt/models"),
        ({}, None),  # no checkpointDir, no exportDir: no export
    ],
)
def test_the_export_dir_reaches_the_trainer(settings: dict[str, str], expected: str | None) -> None:
    (pod,) = pods_of(render_plan(job(trainer={"image": "img:1", **settings}), CLUSTER))
    assert env_of(pod).get("TPUJOB_EXPORT_DIR") == expected


@pytest.mark.parametrize(("settings", "grace"), [({}, 30), ({"terminationGracePeriodSeconds": 60}, 60)])
def test_the_pods_grace_period_is_the_jobs(settings: dict[str, int], grace: int) -> None:
    (pod,) = pods_of(render_plan(job(trainer={"image": "img:1", **settings}), CLUSTER))
    assert pod["spec"]["terminationGracePeriodSeconds"] == grace


def test_tpu7x_multihost_pool_uses_the_workload_policy():
    plan = render_plan(job(tpu=TPU7X_2X2X2, nodePool={"workloadPolicy": "wp-1"}, trainer=JAX), CLUSTER)
    (pool,) = plan.node_pools
    assert pool["placementPolicy"] == {"policyName": "wp-1"}
    assert pool["initialNodeCount"] == 2


def test_tpu7x_workers_get_process_addresses_by_worker_id():
    plan = render_plan(job(tpu=TPU7X_2X2X2, nodePool={"workloadPolicy": "wp-1"}, trainer=JAX), CLUSTER)
    hostnames = env_of(pods_of(plan)[0])["TPU_WORKER_HOSTNAMES"].split(",")
    for pod in pods_of(plan):
        env = env_of(pod)
        assert env["TPU_PROCESS_ADDRESSES"].split(",") == [f"{h}:8471" for h in hostnames]
        assert env["TPU_PROCESS_PORT"] == "8471"
    multislice = {**TPU7X_2X2X2, "slices": 2}
    plan = render_plan(job(tpu=multislice, nodePool={"workloadPolicy": "wp-1"}, trainer=JAX), CLUSTER)
    assert env_of(pods_of(plan)[0])["MEGASCALE_COORDINATOR_ADDRESS"].endswith(":8080")
    single = render_plan(job(tpu={"type": "tpu7x", "topology": "1x1x1"}, trainer=JAX), CLUSTER)
    (pool,) = single.node_pools
    assert pool["config"]["machineType"] == "tpu7x-standard-1t" and "placementPolicy" not in pool
    assert "TPU_PROCESS_ADDRESSES" not in env_of(pods_of(single)[0])  # one host: nobody to find


def test_pool_hygiene_as_gke_tools_do_it():
    (pool,) = render_plan(job(), CLUSTER).node_pools
    assert pool["maxPodsConstraint"] == {"maxPodsPerNode": "16"}
    assert pool["config"]["gvnic"] == {"enabled": True}
    assert pool["config"]["oauthScopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert "workloadMetadataConfig" not in pool["config"]
    parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
    assert parsed.max_pods_constraint.max_pods_per_node == 16
    assert parsed.config.gvnic.enabled is True
    assert list(parsed.config.oauth_scopes) == ["https://www.googleapis.com/auth/cloud-platform"]

    assert "serviceAccount" not in pool["config"]  # none configured: GKE's default

    node_identity = "tpu-nodes@p.iam.gserviceaccount.com"
    operators = dataclasses.replace(
        CLUSTER,
        workload_identity=True,
        node_service_account=node_identity,
        node_oauth_scopes=("https://www.googleapis.com/auth/devstorage.read_write",),
    )
    custom = {"maxPodsPerNode": 32, "gvnic": False}
    (pool,) = render_plan(job(nodePool=custom), operators).node_pools
    assert pool["config"]["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert pool["maxPodsConstraint"] == {"maxPodsPerNode": "32"}
    assert "gvnic" not in pool["config"]
    # The nodes' identity and scopes are the operator's settings.
    assert pool["config"]["oauthScopes"] == ["https://www.googleapis.com/auth/devstorage.read_write"]
    assert pool["config"]["serviceAccount"] == node_identity
    parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
    assert (
        parsed.config.workload_metadata_config.mode == container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA
    )
    assert parsed.config.service_account == node_identity


def test_a_shared_reservation_is_named_by_its_project_path():
    shared = "projects/other-project/reservations/res-1"
    (pool,) = render_plan(job(capacity={"mode": "reservation", "reservation": shared}), CLUSTER).node_pools
    assert pool["config"]["reservationAffinity"]["values"] == [shared]
    parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
    assert list(parsed.config.reservation_affinity.values) == [shared]


@pytest.mark.parametrize(
    ("capacity", "management"),
    [
        ({"mode": "onDemand"}, {"autoUpgrade": True, "autoRepair": True}),
        ({"mode": "spot"}, {"autoUpgrade": True, "autoRepair": True}),
        ({"mode": "reservation", "reservation": "r1"}, {"autoUpgrade": True, "autoRepair": True}),
        ({"mode": "flexStart"}, {"autoUpgrade": True, "autoRepair": False}),  # as xpk --flex
    ],
)
def test_auto_upgrade_is_never_turned_off(capacity, management):
    spec = {"tpu": {"type": "v5p", "topology": "2x2x2"}, "capacity": capacity}
    (pool,) = render_plan(job(**spec), CLUSTER).node_pools
    assert pool["management"] == management
    parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
    assert parsed.management.auto_upgrade is True


def test_local_addresses_keep_their_own_port_in_tpu7x_process_addresses():
    """`tpujob run --local` passes localhost:PORT per worker: no second port may be appended."""
    tpu7x = job(tpu={**TPU7X_2X2X2, "slices": 2}, nodePool={"workloadPolicy": "wp-1"}, trainer=JAX)
    local = ["localhost:5000", "localhost:5001"]
    env = {
        e["name"]: e["value"]
        for e in worker_env(tpu7x, 0, 1, worker_hostnames=local, coordinator_address=local[0])
    }
    assert env["TPU_PROCESS_ADDRESSES"] == "localhost:5000,localhost:5001"
    assert env["MEGASCALE_COORDINATOR_ADDRESS"] == "localhost:5000"
    assert env["TPU_WORKER_HOSTNAMES"] == "localhost:5000,localhost:5001"


@pytest.mark.parametrize(
    ("tpu_spec", "selected"),
    [
        ({"type": "v6e", "topology": "2x4"}, "ct6e-standard-8t"),
        ({"type": "v6e", "topology": "2x4", "machineType": "ct6e-standard-4t"}, "ct6e-standard-4t"),
        ({"type": "v5e", "topology": "2x4"}, "ct5lp-hightpu-8t"),
        ({"type": "v5e", "topology": "2x2"}, None),  # only -4t serves 2x2
        ({"type": "v6e", "topology": "4x4"}, None),
    ],
)
def test_pods_on_existing_pools_name_the_machine_type_when_the_topology_leaves_a_choice(tpu_spec, selected):
    plan = render_plan(job(tpu=tpu_spec, nodePool={"policy": "existing"}), CLUSTER)
    selector = pods_of(plan)[0]["spec"]["nodeSelector"]
    assert selector.get(c.NODE_LABEL_INSTANCE_TYPE) == selected
    created = render_plan(job(tpu=tpu_spec), CLUSTER)  # its own pool is pinned by name instead
    assert c.NODE_LABEL_INSTANCE_TYPE not in pods_of(created)[0]["spec"]["nodeSelector"]


def test_rendering_is_deterministic_byte_for_byte():
    spec = {"tpu": {"type": "v6e", "topology": "4x4", "slices": 2}}
    first = json.dumps(render_plan(job(**spec), CLUSTER).to_dict(), sort_keys=False)
    second = json.dumps(render_plan(job(**spec), CLUSTER).to_dict(), sort_keys=False)
    assert first == second


def test_attempt_changes_pod_names_not_hostnames():
    first = pods_of(render_plan(job(), CLUSTER, attempt=0))[0]
    second = pods_of(render_plan(job(), CLUSTER, attempt=1))[0]
    assert first["metadata"]["name"] != second["metadata"]["name"]
    assert first["spec"]["hostname"] == second["spec"]["hostname"]
    assert env_of(second)["TPUJOB_ATTEMPT"] == "1"


def test_a_flex_start_pool_is_made_as_xpk_makes_it_and_its_pods_select_flex_nodes():
    spec = {
        "tpu": {"type": "v5p", "topology": "2x2x2"},
        "capacity": {"mode": "flexStart", "maxRunDurationSeconds": 7200},
    }
    plan = render_plan(job(**spec), CLUSTER)
    (pool,) = plan.node_pools
    assert pool["initialNodeCount"] == 0
    assert pool["autoscaling"] == {
        "enabled": True,
        "minNodeCount": 0,
        "maxNodeCount": 2,
        "locationPolicy": "ANY",
    }
    assert pool["management"] == {"autoUpgrade": True, "autoRepair": False}
    assert pool["config"]["flexStart"] is True
    assert pool["config"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    parsed = container_v1.NodePool.from_json(json.dumps(pool), ignore_unknown_fields=False)
    assert parsed.config.max_run_duration.total_seconds() == 7200
    assert parsed.autoscaling.location_policy == container_v1.NodePoolAutoscaling.LocationPolicy.ANY
    for pod in pods_of(plan):
        assert pod["spec"]["nodeSelector"][c.NODE_LABEL_FLEX_START] == "true"


def test_pods_can_be_kept_off_nodes_under_maintenance_notice():
    (pod,) = pods_of(render_plan(job(), CLUSTER))
    assert "affinity" not in pod["spec"]
    from tpujob.render.plan import pod as render_pod

    terms = render_pod(job(), CLUSTER, 0, 0, avoid_maintenance_before=1_800_000_000)["spec"]["affinity"][
        "nodeAffinity"
    ]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    label = "cloud.google.com/scheduled-maintenance-time"
    assert terms == [
        {"matchExpressions": [{"key": label, "operator": "DoesNotExist"}]},
        {"matchExpressions": [{"key": label, "operator": "Gt", "values": ["1800000000"]}]},
    ]


def test_a_tpu7x_flex_start_pool_is_made_as_xpk_makes_it_with_its_workload_policy():
    # xpk's Ironwood flex-start recipes: --flex (flex-start, autoscaling 0..hosts, ANY, no reservation, no
    # auto-repair) and --placement-policy for a multi-host tpu7x slice.
    spec = {"tpu": TPU7X_2X2X2, "capacity": {"mode": "flexStart"}, "nodePool": {"workloadPolicy": "wp-1"}}
    (pool,) = render_plan(job(**spec, trainer=JAX), CLUSTER).node_pools
    assert pool["config"]["flexStart"] is True
    assert pool["config"]["machineType"] == "tpu7x-standard-4t"
    assert pool["config"]["reservationAffinity"] == {"consumeReservationType": "NO_RESERVATION"}
    assert pool["initialNodeCount"] == 0 and pool["autoscaling"]["maxNodeCount"] == 2
    assert pool["autoscaling"]["locationPolicy"] == "ANY"
    assert pool["management"] == {"autoUpgrade": True, "autoRepair": False}
    assert pool["placementPolicy"] == {"policyName": "wp-1"}
