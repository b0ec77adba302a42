"""The TPUJob API: models, validation, constants and the generated CRD. Pure: no I/O."""

from tpujob.api.models import TPUJob, TPUJobSpec, TPUJobStatus
from tpujob.api.validation import InvalidTPUJob, Problem, parse_tpujob

__all__ = ["InvalidTPUJob", "Problem", "TPUJob", "TPUJobSpec", "TPUJobStatus", "parse_tpujob"]
