"""What handlers/owned.py uses of kopf's private modules, as it uses it: an upgrade of kopf (pinned in
pyproject.toml) that moves or changes any of it fails here, not in a watch at run time."""

from __future__ import annotations

import importlib.metadata
import inspect
import tomllib
from pathlib import Path

from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from tpujob.handlers import owned


def test_kopf_is_pinned_to_the_version_these_names_were_read_from() -> None:
    dependencies = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    pins = [d for d in dependencies["project"]["dependencies"] if d.startswith("kopf")]
    assert pins == ["kopf==1.45.2"]
    assert importlib.metadata.version("kopf") == "1.45.2"


def test_the_watch_stream_takes_what_owned_passes_and_yields_the_bookmarks_it_reads() -> None:
    parameters = inspect.signature(watching.infinite_watch).parameters
    assert {"settings", "resource", "namespace"} <= set(parameters)
    assert inspect.isasyncgenfunction(watching.infinite_watch)
    assert {"LISTED"} <= {member.name for member in watching.Bookmark}


def test_the_resources_owned_builds_are_kopfs_resource_and_namespace_types() -> None:
    for resource in (owned.POD_RESOURCE, owned.SERVICE_RESOURCE, owned.workload_resource("v1beta1")):
        assert isinstance(resource, references.Resource)
        assert resource.namespaced and {"list", "watch"} <= set(resource.verbs)
    assert references.NamespaceName("ns") == "ns"
