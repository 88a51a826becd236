"""The recall evaluation's report (issue 16): pooled drafts scored on the traffic since a shift.

When traffic shifts and the draft pool holds other drafts of this target, the operator runs an
evaluation Job (the trainer image, labelled as evaluation, no training) before any training run: it
scores the served draft and each pooled draft on the same newly captured samples, with the trainer's
own held-out acceptance estimate, and writes this report to ``candidates/<run_id>/recall.json``.
The operator recalls the best pooled draft when it beats the served one by the canary's margin, and
trains only otherwise. Scores of one report are comparable with each other, never across reports.

``source`` names where the Job read each draft: ``drafts/vN`` of the registry for a promoted draft, and
``spec.draft.initial`` for the launch draft (``initial``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

RECALL_REPORT_FILE = "recall.json"
RECALL_REPORT_VERSION = 1
POOLED_VERSION = r"^(initial|v[1-9][0-9]*)$"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RecallScore(_Frozen):
    version: str = Field(pattern=POOLED_VERSION)
    acceptance_length: float = Field(ge=1.0, le=64.0)  # expected tokens per target step, as the trainer's eval


class RecallReport(_Frozen):
    report_version: int = RECALL_REPORT_VERSION
    run_id: str = Field(min_length=1, max_length=63)
    target_revision: str
    served_version: str | None = Field(default=None, pattern=POOLED_VERSION)  # None: nothing served yet
    served_acceptance_length: float = Field(ge=1.0, le=64.0)  # the served draft on the same samples
    scores: tuple[RecallScore, ...] = Field(max_length=64)  # the pooled drafts, served one excluded
    eval_tokens: int = Field(ge=0)  # target tokens the scores were measured on
    captured_since: float | None = None  # the claim's start (epoch s): the shift the samples follow

    @model_validator(mode="after")
    def _distinct(self) -> RecallReport:
        versions = [s.version for s in self.scores]
        if len(set(versions)) != len(versions):
            raise ValueError(f"a version is scored twice: {versions}")
        if self.served_version is not None and self.served_version in versions:
            raise ValueError(f"the served draft {self.served_version} is scored as a pooled one")
        return self

    def best(self) -> RecallScore | None:
        """The highest score, ties to the lowest version name (deterministic across readers)."""
        return min(self.scores, key=lambda s: (-s.acceptance_length, s.version), default=None)
