"""Generated files match their source: `make generate` rewrites them."""

import importlib.util
from pathlib import Path

import yaml

from tpujob.api.crd import crd, crd_yaml
from tpujob.api.status import Phase

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
    assert columns == [
        "Type",
        "Topology",
        "Slices",
        "Phase",
        "Restarts",
        "ClusterQueue",
        "Queue",
        "Reason",
        "Progress",
        "ETA",
        "Age",
        "Message",
    ]
    reason = next(col for col in version["additionalPrinterColumns"] if col["name"] == "Reason")
    assert reason["jsonPath"] == ".status.reason"
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
    # Kept only to be refused with its fix (the operator's setting): no default a job would inherit.
    assert "default" not in pool["oauthScopes"] and pool["oauthScopes"]["maxItems"] == 16
    assert all(pool[name]["description"] for name in ("maxPodsPerNode", "gvnic", "oauthScopes"))
    timeout = schema["spec"]["properties"]["runPolicy"]["properties"]["provisioningTimeoutSeconds"]
    assert timeout["minimum"] == 1 and "default" not in timeout
    assert "provisioningSince" in schema["status"]["properties"]
    assert {"operation", "zone"} <= schema["status"]["properties"]["nodePools"]["items"]["properties"].keys()


def test_status_phase_is_an_enum_of_phase_and_its_description_names_them_all():
    phase = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
        "phase"
    ]
    assert phase["enum"] == [p.value for p in Phase]
    assert all(p.value in phase["description"] for p in Phase)


# The keywords of Kubernetes' JSONSchemaProps (apiextensions.k8s.io/v1) this generator may emit; anything else
# (JSON Schema's const, propertyNames, ...) a 1.20 API server drops silently and a strict one refuses.
KUBERNETES_KEYWORDS = {
    "type", "description", "properties", "items", "additionalProperties", "required", "enum", "default",
    "pattern", "minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems", "maxProperties",
    "format", "nullable",
    "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
}  # fmt: skip


def test_every_schema_keyword_is_one_kubernetes_has():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        assert node.keys() <= KUBERNETES_KEYWORDS, (path, node.keys() - KUBERNETES_KEYWORDS)


def test_every_list_and_map_is_bounded():
    """The API server estimates the CEL rules' cost from these bounds (an unbounded list or map counts as
    long as a whole request) and refuses a CRD over its budget."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    unbounded = [
        path
        for path, node in _nodes(schema)
        if (node.get("type") == "array" and "maxItems" not in node)
        or (isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node)
    ]
    assert not unbounded


def test_keyed_lists_are_keyed_by_a_required_field():
    """x-kubernetes-list-type map: the API server refuses two items with one key (proven on the test bed's
    1.20 API server); its keys must be required in every item."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    keyed = {path: node for path, node in _nodes(schema) if node.get("x-kubernetes-list-type") == "map"}
    assert {
        "$.spec.trainer.env",
        "$.spec.pod.volumes",
        "$.spec.pod.containers",
        "$.spec.pod.initContainers",
    } <= (keyed.keys())
    for path, node in keyed.items():
        assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"]["required"]), path


def test_the_operator_image_constraints_name_every_runtime_dependency():
    """operator/Dockerfile installs exactly operator/constraints.txt: a dependency missing there is missing in
    the image (pyrate-limiter was). Names only: the versions are the ones the tests last ran with."""
    path = ROOT / "scripts/operator_constraints.py"
    spec = importlib.util.spec_from_file_location("operator_constraints", path)
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    lines = (ROOT / "operator/constraints.txt").read_text().splitlines()
    pinned = {line.partition("==")[0] for line in lines if line and not line.startswith("#")}
    missing = sorted(set(script.closure("tpujob")) - pinned)
    assert not missing, f"operator/constraints.txt lacks {missing}: run `make generate`"


def test_committed_reference_pages_match_the_code():
    """docs/reference/{api,settings,values,metrics,alerts}.md: what scripts/generate_docs.py writes."""
    from scripts.generate_docs import pages

    for path, expected in pages().items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make generate`"
        assert path.read_text() == expected, f"{path.relative_to(ROOT)} drifted: run `make generate`"


def test_the_api_reference_lists_every_field_and_every_cel_rule_of_the_crd():
    from scripts.generate_docs import REFERENCE

    page = (REFERENCE / "api.md").read_text()
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def walk(node, path):
        for name, child in node.get("properties", {}).items():
            yield path, name, child
            yield from walk(child, f"{path}.{name}")
        for key, mark in (("items", "[]"), ("additionalProperties", "{}")):
            if isinstance(node.get(key), dict):
                yield from walk(node[key], path + mark)

    for path, name, child in walk(schema["properties"]["spec"], "TPUJob.spec"):
        section = page.split(f"\n## `{path}`\n", 1)
        assert len(section) == 2, f"no section for {path}"
        assert f"| `{name}`" in section[1].split("\n## ", 1)[0], f"{path}.{name} is not in its table"
        for rule in child.get("x-kubernetes-validations", []):
            assert rule["rule"].split()[0] in page, f"{path}.{name}: a rule is missing"
    assert "## `TPUJob.spec.tpu`" in page and "| `topology` (required) | string |" in page
