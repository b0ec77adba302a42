"""The Grafana dashboard's PromQL, taken apart: every expression, the metric names it reads, and the
metric names the operator and the trainer export (from their registries, not from a list)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

from tests.chart.conftest import CHART

DASHBOARD = CHART / "dashboards" / "tpujob.json"
# What Grafana puts in place of its variables before it sends a query. `.*` is the dashboard's
# "All" value of namespace and job; the test bed's run is short, so 5m covers all of it.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__range": "5m",
    "$__interval": "15s",
    "$namespace": ".*",
    "$job": ".*",
}
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "and", "or", "unless", "inf", "nan",
}  # fmt: skip
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Query:
    where: str  # panel title / refId, or the variable's name
    expr: str  # as Grafana stores it


def load() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def queries(dashboard: dict[str, Any] | None = None) -> list[Query]:
    """Every panel target's expr, and the series selector of every label_values() variable."""
    board = dashboard or load()
    found = [
        Query(f"{panel['title']} / {target['refId']}", target["expr"])
        for panel in _panels(board["panels"])
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["definition"])
        assert match, f"variable {variable['name']}: expected label_values(SELECTOR, LABEL)"
        found.append(Query(f"variable {variable['name']}", match.group(1)))
    return found


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def substitute(expr: str) -> str:
    """The query Grafana would send with every variable at its widest value."""
    for name in sorted(GRAFANA_VARIABLES, key=len, reverse=True):
        expr = expr.replace(name, GRAFANA_VARIABLES[name])
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads: identifiers that are not functions, keywords, label
    names (inside {} or by/without/on/ignoring/group_x lists), numbers or durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text):
        name, rest = match.group(0), text[match.end() :]
        if rest.lstrip().startswith("(") or name.lower() in PROMQL_KEYWORDS:
            continue
        if match.start() and (text[match.start() - 1].isdigit() or text[match.start() - 1] == "."):
            continue  # 1e3, 0.5 ... (the letters of a number)
        names.add(name)
    return names


def _sample_names(family: Metric) -> set[str]:
    """Names a family's samples are exported under (what PromQL selects)."""
    name = family.name
    kind = family.type
    if kind == "counter":
        return {f"{name}_total", f"{name}_created"}
    if kind == "histogram":
        return {f"{name}{suffix}" for suffix in HISTOGRAM_SUFFIXES} | {f"{name}_created"}
    if kind == "summary":
        return {name, f"{name}_sum", f"{name}_count", f"{name}_created"}
    if kind == "info":
        return {f"{name}_info"}
    return {name}


def operator_metric_names() -> set[str]:
    """Every tpujob_ name the operator's metrics module exports (its collectors, in a fresh registry)."""
    from tpujob import metrics

    scrape_time = CollectorRegistry()
    metrics.register(metrics.PassRecorder(), scrape_time)  # scrape-time collectors; the rest in REGISTRY
    families = [*REGISTRY.collect(), *scrape_time.collect()]
    return {n for family in families for n in _sample_names(family) if n.startswith("tpujob_")}


def trainer_metric_names() -> set[str]:
    from tpujob_trainer.metrics import TrainerMetrics

    return {n for family in TrainerMetrics().registry.collect() for n in _sample_names(family)}
