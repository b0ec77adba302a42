"""The TPUJob API: models, validation, constants and the generated CRD. Pure: no I/O."""

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
