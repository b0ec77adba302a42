"""The operator's brain, pure: what it observed -> what to do and what the status says.

`decide()` takes a snapshot (the job, its last status, its pods, its node pools, the time) and
returns a Decision: pools to create or delete, pods to create or delete, the new status, events,
and when to look again. The handlers execute it. Being pure, every life-cycle rule is table-tested
without a cluster, and a crash between any two API calls converges: the next snapshot shows what
was done, and the same rules pick up from there.

Parts: `model` (sets of phases and reasons, views, Observed, Decision), `lifecycle` (decide: the life cycle),
`pools` (node pools per slice), `capacity` (flex-start, maintenance, zone fallback), `builder` (the
decision under construction and the steps the others share).
"""

from tpujob.status.lifecycle import decide
from tpujob.status.model import *  # noqa: F403  (the names every caller uses: s.PodView, s.TERMINAL_PHASES, ...)
from tpujob.status.model import __all__ as _model_names

__all__ = ["decide", *_model_names]
