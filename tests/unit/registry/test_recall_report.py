"""The recall evaluation's report (tide_contracts.recall): what the evaluation Job writes, the operator reads."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from tide_contracts.recall import RecallReport, RecallScore
from tide_contracts.registry import DraftRegistry, RegistryError


def _report(scores: tuple[RecallScore, ...], served: str | None = "v3") -> RecallReport:
    return RecallReport(run_id="3fa9c2d1-r7", target_revision="rev-1", served_version=served,
                        served_acceptance_length=1.3, scores=scores, eval_tokens=4096)


def test_best_is_the_highest_score_and_ties_go_to_the_lowest_version() -> None:
    report = _report((RecallScore(version="v2", acceptance_length=2.4), RecallScore(version="initial",
                     acceptance_length=2.9), RecallScore(version="v1", acceptance_length=2.9)))
    assert report.best() == RecallScore(version="initial", acceptance_length=2.9)
    assert _report(()).best() is None


@pytest.mark.parametrize(("scores", "served", "error"), [
    ((RecallScore(version="v1", acceptance_length=2.0), RecallScore(version="v1", acceptance_length=2.1)), "v3",
     "scored twice"),
    ((RecallScore(version="v3", acceptance_length=2.0),), "v3", "served draft v3 is scored"),
])
def test_a_report_scoring_a_draft_twice_or_the_served_one_is_refused(scores: tuple[RecallScore, ...],
                                                                      served: str, error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        _report(scores, served)


@pytest.mark.parametrize("version", ["v0", "candidates/r1", "../v1", "V1", ""])
def test_only_pooled_version_names_are_scored(version: str) -> None:
    with pytest.raises(ValidationError, match="version"):
        RecallScore(version=version, acceptance_length=2.0)


def test_an_acceptance_length_below_one_is_refused() -> None:
    with pytest.raises(ValidationError, match="acceptance_length"):
        RecallScore(version="v1", acceptance_length=0.5)


# ---- the operator's read of the report (DraftRegistry.recall_report) against the loopback S3 server


def _registry(s3: object) -> DraftRegistry:
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    return DraftRegistry(s3, bucket, "llm/chat")


def test_the_registry_reads_the_report_the_job_wrote(s3: object) -> None:
    registry = _registry(s3)
    written = _report((RecallScore(version="v1", acceptance_length=2.6),))
    s3.put_object(Bucket=registry.bucket, Key="llm/chat/candidates/3fa9c2d1-r7/recall.json",  # type: ignore[attr-defined]
                  Body=written.model_dump_json().encode())
    assert registry.recall_report("3fa9c2d1-r7") == written
    assert registry.recall_report("3fa9c2d1-r8") is None  # the Job has not written it (yet)


def test_an_unparsable_report_is_an_error_naming_its_key(s3: object) -> None:
    registry = _registry(s3)
    key = "llm/chat/candidates/3fa9c2d1-r7/recall.json"
    s3.put_object(Bucket=registry.bucket, Key=key, Body=b'{"report_version": 1, "run_id": "x"}')  # type: ignore[attr-defined]
    with pytest.raises(RegistryError, match=key):
        registry.recall_report("3fa9c2d1-r7")
    with pytest.raises(RegistryError, match="run id"):
        registry.recall_report("../promoted")  # a run id never shapes a key outside candidates/
