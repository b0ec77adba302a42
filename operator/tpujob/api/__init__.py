"""The TPUJob API: models, validation, constants and the generated CRD. Pure: no I/O.

The models: job (the TPUJob object), spec, run_policy, pod and volumes (what a team adds to its pods),
status, tenancy (what each namespace may do), base (what they share), constants (names defined once) and
trainer_contract (the env between the operator and the trainer). The rules: validation (a manifest into a
TPUJob, or problems naming the field and the fix), pod_validation (the pod parts' rules), messages (their
words). The CRD: crd (generated from the models), cel, cel_catalog and cel_text (its CEL rules).
"""

from tpujob.api.job import TPUJob
from tpujob.api.spec import TPUJobSpec
from tpujob.api.status import TPUJobStatus
from tpujob.api.validation import OPERATOR_ZONE_SETTING, DefaultZones, InvalidTPUJob, Problem, parse_tpujob

__all__ = [
    "OPERATOR_ZONE_SETTING",
    "DefaultZones",
    "InvalidTPUJob",
    "Problem",
    "TPUJob",
    "TPUJobSpec",
    "TPUJobStatus",
    "parse_tpujob",
]
