"""The TPUJob object itself: its metadata, its spec (spec.py) and its status (status.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from tpujob.api.base import ApiModel
from tpujob.api.constants import API_VERSION, KIND
from tpujob.api.spec import TPUJobSpec
from tpujob.api.status import TPUJobStatus

# Longest TPUJob name: pod hostnames append "-s<slice>-w<worker>" and must stay a 63-character label.
MAX_JOB_NAME_LENGTH = 48


class ObjectMeta(BaseModel):
    """The metadata fields the operator reads; the API server owns the rest."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, alias_generator=to_camel)

    name: str = Field(default="", max_length=MAX_JOB_NAME_LENGTH, pattern=r"^([a-z]([-a-z0-9]*[a-z0-9])?)?$")
    namespace: str = Field(default="default")
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class TPUJob(ApiModel):
    """A TPU training job: TPU slices, capacity, the trainer and how to behave on failure."""

    api_version: str = Field(default=API_VERSION, pattern=f"^{API_VERSION}$")
    kind: str = Field(default=KIND, pattern=f"^{KIND}$")
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: TPUJobSpec
    status: TPUJobStatus | None = None
