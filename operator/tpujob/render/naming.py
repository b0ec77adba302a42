"""Stable names of everything a TPUJob owns. Deterministic: the same job always gets the same names."""

from __future__ import annotations

import hashlib

from tpujob.api.job import TPUJob

# GKE node pool names: at most 40 characters, RFC 1035 label.
MAX_POOL_NAME = 40


def _short_hash(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:6]


def node_pool_name(job: TPUJob, slice_index: int) -> str:
    """tj-<job name, truncated>-<hash of namespace/name/uid>-<slice>.

    The hash keeps two namespaces' jobs of the same name apart, and a re-created job (new UID)
    apart from the pools of its deleted predecessor that may still be deleting.
    """
    meta = job.metadata
    suffix = f"-{_short_hash(meta.namespace, meta.name, meta.uid or '')}-{slice_index}"
    room = MAX_POOL_NAME - len("tj-") - len(suffix)
    stem = meta.name[:room].rstrip("-")
    return f"tj-{stem}{suffix}"


def service_name(job: TPUJob) -> str:
    """The headless Service shares the job's name, so hostnames read <worker>.<job>."""
    return job.metadata.name


def worker_hostname(job: TPUJob, slice_index: int, worker_index: int) -> str:
    """Stable across restarts (unlike pod names), so the worker list never changes."""
    return f"{job.metadata.name}-s{slice_index}-w{worker_index}"


def worker_address(job: TPUJob, slice_index: int, worker_index: int) -> str:
    """DNS name of a worker inside the namespace: <hostname>.<service>."""
    return f"{worker_hostname(job, slice_index, worker_index)}.{service_name(job)}"


def hosts_config_map_name(job: TPUJob, slice_index: int) -> str:
    """The ConfigMap that holds a large slice's host list once (render/plan.py hosts_config_map)."""
    return f"{job.metadata.name}-s{slice_index}-hosts"


def pod_name(job: TPUJob, slice_index: int, worker_index: int, attempt: int) -> str:
    """The attempt is part of the name so a restart can create new pods while old ones terminate."""
    return f"{worker_hostname(job, slice_index, worker_index)}-a{attempt}"
