"""What the operator's log says at its default level, and how: transitions, decisions and real problems, each
once; no line per HTTP request, and a wait is not an error. JSON lines with Cloud Logging's fields on request
(TPUJOB_LOG_FORMAT=json, the chart's `logFormat`).

Cloud Logging reads these fields of a JSON log line (cloud.google.com/logging/docs/structured-logging):
`severity` (its LogSeverity names: DEBUG, INFO, WARNING, ERROR, CRITICAL), `message`, `time` (RFC 3339),
`logging.googleapis.com/labels` (a map of strings: here the job's namespace and name) and
`logging.googleapis.com/sourceLocation`. Anything else stays in jsonPayload.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

# The finalizer's wait for GKE (handlers/deletion.py), said once per job: the normal end of a job with pools.
WAITING_FOR_POOLS = "waiting for node pools to be deleted"
# Loggers that write a line per HTTP request at INFO: the operator's own client and the GKE client's.
REQUEST_LOGGERS = ("httpx", "httpx2", "urllib3", "google.auth.transport.requests")
LABELS = "logging.googleapis.com/labels"
SOURCE = "logging.googleapis.com/sourceLocation"


def job(namespace: str, name: str) -> dict[str, Any]:
    """`extra=` for a log line about a job: as kopf's own lines about an object carry it (k8s_ref)."""
    return {"k8s_ref": {"namespace": namespace, "name": name}}


class CloudLoggingFormatter(JsonFormatter):
    """One JSON object a line, with Cloud Logging's fields; a line about a job labels its namespace and
    name (kopf's lines through their k8s_ref, ours through `extra=logs.job(...)`)."""

    def __init__(self) -> None:
        super().__init__(reserved_attrs=[*RESERVED_ATTRS, "k8s_ref", "k8s_skip", "settings"])

    def add_fields(
        self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record["severity"] = _SEVERITY.get(record.levelno, "DEFAULT")
        log_record["time"] = dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat()
        log_record["logger"] = record.name
        log_record[SOURCE] = {
            "file": record.pathname,
            "line": str(record.lineno),
            "function": record.funcName,
        }
        ref = getattr(record, "k8s_ref", None)
        if isinstance(ref, dict):
            labels = {key: str(ref[key]) for key in ("namespace", "name") if ref.get(key)}
            if labels:
                log_record[LABELS] = labels


_SEVERITY = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARNING",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "CRITICAL",
}


def configure(verbose: bool, log_format: str) -> None:
    """After kopf.configure (which installs the root handler): the default level's quiet, and the format."""
    if not verbose:
        # kopf logs every handler call: thousands of lines in a burst of jobs. Its failures still show.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        for name in REQUEST_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
    if log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(CloudLoggingFormatter())
