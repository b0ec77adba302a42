"""Every module of the operator and of its test bed sits in an import-linter layer (pyproject.toml): a module
in none is checked by no layer contract, so its imports could go any way unnoticed."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"tpujob": ROOT / "operator" / "tpujob", "tpujob_sandbox": ROOT / "sandbox" / "tpujob_sandbox"}


def _contracts() -> list[dict]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _named(layers: list[str]) -> set[str]:
    return {module.strip() for layer in layers for module in layer.split("|")}


def _modules(folder: Path) -> set[str]:
    return {
        path.stem if path.suffix == ".py" else path.name
        for path in folder.iterdir()
        if not path.name.startswith(("_", ".")) and (path.suffix == ".py" or (path / "__init__.py").exists())
    }


def test_every_module_of_a_layered_package_is_in_a_layer():
    missing = []
    for contract in _contracts():
        if contract.get("type") != "layers":
            continue
        named = _named(contract["layers"])
        for container in contract.get("containers") or []:
            package, _, sub = container.partition(".")
            folder = PACKAGES[package] / sub.replace(".", "/")
            missing += [f"{container}.{m}" for m in sorted(_modules(folder) - named)]
        if not contract.get("containers"):
            for package, folder in PACKAGES.items():
                if any(name.startswith(f"{package}.") for name in named):
                    missing += [
                        f"{package}.{m}" for m in sorted(_modules(folder)) if f"{package}.{m}" not in named
                    ]
    assert not missing, f"modules in no layer of pyproject.toml's import-linter contracts: {missing}"
