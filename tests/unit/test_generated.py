"""Generated files match their source: `make generate` rewrites them."""

from pathlib import Path

import yaml

from tpujob.api.crd import crd, crd_yaml

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = [
    ROOT / "crds/tpujob.dev_tpujobs.yaml",
    ROOT / "charts/tpujob-operator/crds/tpujob.dev_tpujobs.yaml",
]


def test_committed_crd_matches_the_models():
    expected = crd_yaml()
    for path in COMMITTED:
        assert path.read_text() == expected, f"{path.relative_to(ROOT)} drifted: run `make generate`"


def _nodes(schema, path="$"):
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural():
    """Every node typed, no $ref/anyOf/title leftovers, no additionalProperties beside properties."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        assert "type" in node, f"{path} has no type"
        assert not {"$ref", "anyOf", "allOf", "title", "$defs"} & node.keys(), path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_crd_has_status_subresource_printer_columns_and_cel():
    version = crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [col["name"] for col in version["additionalPrinterColumns"]]
    assert columns == ["Type", "Topology", "Slices", "Phase", "Restarts", "Age"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["tpu"]["properties"]["type"]["enum"] == ["v4", "v5e", "v5p", "v6e", "tpu7x"]
    assert spec["properties"]["tpu"]["x-kubernetes-validations"]
    assert spec["properties"]["capacity"]["x-kubernetes-validations"]
    assert spec["properties"]["capacity"]["properties"]["mode"]["default"] == "onDemand"


def test_committed_yaml_parses_as_one_crd():
    (document,) = list(yaml.safe_load_all(COMMITTED[0].read_text()))
    assert document["kind"] == "CustomResourceDefinition"


def test_crd_carries_the_node_pool_hygiene_fields_with_their_bounds_and_defaults():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    pool = schema["spec"]["properties"]["nodePool"]["properties"]
    assert (pool["maxPodsPerNode"]["minimum"], pool["maxPodsPerNode"]["maximum"]) == (8, 256)
    assert pool["maxPodsPerNode"]["default"] == 16
    assert pool["gvnic"]["default"] is True
    assert pool["oauthScopes"]["default"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert all(pool[name]["description"] for name in ("maxPodsPerNode", "gvnic", "oauthScopes"))
    timeout = schema["spec"]["properties"]["runPolicy"]["properties"]["provisioningTimeoutSeconds"]
    assert timeout["minimum"] == 1 and "default" not in timeout
    assert "provisioningSince" in schema["status"]["properties"]
    assert {"operation", "zone"} <= schema["status"]["properties"]["nodePools"]["items"]["properties"].keys()
