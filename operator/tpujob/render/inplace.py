"""What a pod needs to restart its trainer in place (restartStrategy RecreateSlice). Pure."""

from __future__ import annotations

from typing import Any

from tpujob.api import constants as c
from tpujob.api import trainer_contract as contract

RESTART_ATTEMPT_VOLUME = "tpujob-restart-attempt"


def restart_in_place(spec: dict[str, Any], metadata: dict[str, Any], attempt: int) -> None:
    """restartStrategy RecreateSlice: the pod carries the attempt its trainer is to run (an annotation the
    operator raises when it keeps the pod through a narrow restart), shown to the trainer container as a
    file through a downward API volume, which the kubelet rewrites when the annotation changes
    (kubernetes.io/docs/concepts/workloads/pods/downward-api/: "the kubelet ... updates the files"; env
    vars, by contrast, never change). The trainer restarts its training process when the number rises."""
    metadata.setdefault("annotations", {})[c.ANNOTATION_RESTART_ATTEMPT] = str(attempt)
    field = f"metadata.annotations['{c.ANNOTATION_RESTART_ATTEMPT}']"
    item = {"path": contract.RESTART_ATTEMPT_FILE_NAME, "fieldRef": {"fieldPath": field}}
    spec.setdefault("volumes", []).append({"name": RESTART_ATTEMPT_VOLUME, "downwardAPI": {"items": [item]}})
    trainer = spec["containers"][0]
    trainer.setdefault("volumeMounts", []).append(
        {"name": RESTART_ATTEMPT_VOLUME, "mountPath": contract.RESTART_ATTEMPT_DIR, "readOnly": True}
    )
    path = f"{contract.RESTART_ATTEMPT_DIR}/{contract.RESTART_ATTEMPT_FILE_NAME}"
    trainer["env"].append({"name": contract.ENV_RESTART_ATTEMPT_FILE, "value": path})
