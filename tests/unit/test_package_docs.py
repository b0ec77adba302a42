"""Each package's docstring is its map: it names every module and subpackage it holds, so a module added
without a word of where it fits fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(
    init.parent
    for top in (ROOT / "operator" / "tpujob", ROOT / "sandbox" / "tpujob_sandbox")
    for init in top.rglob("__init__.py")
)


def members(package: Path) -> list[str]:
    """Its modules and subpackages, by name."""
    return sorted(
        path.stem if path.suffix == ".py" else path.name
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    )


@pytest.mark.parametrize("package", PACKAGES, ids=[str(p.relative_to(ROOT)) for p in PACKAGES])
def test_the_package_docstring_names_every_module(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    unnamed = [
        name for name in members(package) if not re.search(rf"(?<![\w.]){re.escape(name)}\b", docstring)
    ]
    assert not unnamed, f"{package.relative_to(ROOT)}/__init__.py's docstring does not name {unnamed}"
