"""The operator's log at its default level: no line per HTTP request, the finalizer's wait not an ERROR, and
JSON lines with Cloud Logging's fields."""

from __future__ import annotations

import json
import logging

import pytest

from tpujob import logs


def record(name: str, level: int, message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, message, None, None, func="f")
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_the_default_level_has_no_request_lines_and_verbose_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*logs.REQUEST_LOGGERS, "kopf.objects"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    logs.configure(verbose=True, log_format="text")
    assert logging.getLogger("httpx2").level == logging.NOTSET
    logs.configure(verbose=False, log_format="text")
    assert logging.getLogger("httpx2").level == logging.WARNING
    assert logging.getLogger("kopf.objects").level == logging.WARNING


def test_json_lines_carry_cloud_loggings_fields_and_the_jobs_labels() -> None:
    formatter = logs.CloudLoggingFormatter()
    ours = record(
        "tpujob.handlers.deletion", logging.WARNING, "ns-a/train: something", **logs.job("ns-a", "train")
    )
    line = json.loads(formatter.format(ours))
    assert line["severity"] == "WARNING" and line["message"] == "ns-a/train: something"
    assert line["logging.googleapis.com/labels"] == {"namespace": "ns-a", "name": "train"}
    assert line["time"].endswith("+00:00") and line["logger"] == "tpujob.handlers.deletion"
    assert line["logging.googleapis.com/sourceLocation"]["function"] == "f"
    assert "k8s_ref" not in line
    kopfs = record("kopf.objects", logging.ERROR, "x", k8s_ref={"namespace": "b", "name": "j", "uid": "u"})
    assert json.loads(formatter.format(kopfs))["logging.googleapis.com/labels"] == {
        "namespace": "b",
        "name": "j",
    }
    plain = json.loads(formatter.format(record("tpujob.gke", logging.INFO, "pool asked for")))
    assert plain["severity"] == "INFO" and "logging.googleapis.com/labels" not in plain
