"""TPUJob manifests read from files, with every problem named (for `tpujob validate`, `render` and `run`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tpujob.api import DefaultZones, InvalidTPUJob, TPUJob, parse_tpujob

YAML_SUFFIXES = (".yaml", ".yml")


def manifest_files(paths: list[Path]) -> list[Path]:
    """The files to read: each file as given, each directory's *.yaml and *.yml files at any depth, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())
        else:
            files.append(path)
    return files


def load_documents(path: Path) -> Iterator[tuple[str, Any]]:
    """(label for messages, document) for every YAML document in a file."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    for index, document in enumerate(documents):
        label = str(path) if len(documents) == 1 else f"{path} (document {index + 1})"
        yield label, document


def read_documents(path: Path) -> tuple[list[tuple[str, Any]], str]:
    """(label, document) for every YAML document of a file, or ([], the one problem that stops reading it)."""
    try:
        documents = list(load_documents(path))
    except OSError as error:
        return [], f"{path}: cannot read: {error.strerror}"
    except yaml.YAMLError as error:
        return [], f"{path}: not valid YAML: {error}".replace("\n", " ")
    return documents, "" if documents else f"{path}: no TPUJob in the file"


def problems_in(path: Path, default_zones: DefaultZones | None = None) -> Iterator[str]:
    """Every problem of every document, each naming its file and field; with `default_zones`, a job that
    names no zone is also checked against them."""
    documents, unreadable = read_documents(path)
    if unreadable:
        yield unreadable
    for label, document in documents:
        try:
            parse_tpujob(document, default_zones)
        except InvalidTPUJob as invalid:
            yield from (f"{label}: {problem}" for problem in invalid.problems)


def load_one_job(path: Path) -> TPUJob:
    """The single TPUJob in a file, or SystemExit(1) after printing every problem."""
    problems = list(problems_in(path))
    if not problems:
        documents = list(load_documents(path))
        if len(documents) == 1:
            return parse_tpujob(documents[0][1])
        problems = [f"{path}: holds {len(documents)} documents; give one TPUJob per file"]
    for line in problems:
        print(line, file=sys.stderr)
    raise SystemExit(1)
