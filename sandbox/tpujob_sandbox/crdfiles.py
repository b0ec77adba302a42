"""CRD files as the test bed reads them: each file parsed once per process, with libyaml's loader. Kueue's
CRDs are 1.3 MB of YAML; parsed with the pure-Python loader on every install they were a sixth of a test
worker's CPU (py-spy, tests/e2e/test_kueue.py). Callers edit what they get (served versions, annotations),
so each call returns new objects."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml


@functools.cache
def _documents_json(path: Path, modified_ns: int) -> str:
    with path.open() as file:
        documents = [d for d in yaml.load_all(file, Loader=yaml.CSafeLoader) if d]
    return json.dumps(documents)


def documents(path: Path) -> list[dict[str, Any]]:
    """The file's YAML documents (empty ones left out), fresh objects on every call; a file changed since
    it was read is read again."""
    parsed: list[dict[str, Any]] = json.loads(_documents_json(path, path.stat().st_mtime_ns))
    return parsed


def crds(folder: Path) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of the folder's *.yaml files, in file name order."""
    return [
        document
        for file in sorted(folder.glob("*.yaml"))
        for document in documents(file)
        if document.get("kind") == "CustomResourceDefinition"
    ]
