"""The recall sensors (issue 16): the pool offered to the lifecycle only when a recall could be due (pool.json is
not read every pass) and never the launch draft; the evaluation Job's outcome and its report while Recalling;
a recalled candidate's Evaluating reads no candidate manifest; the buffer still counts from the training launch
before a recall."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from tide_contracts.draft_pool import DomainSignature, DraftPool, PoolEntry
from tide_contracts.recall import RecallReport, RecallScore
from tide_contracts.registry import CaptureObject, PromotedPointer, RegistryError
from tide_contracts.signature import PROJECTION
from tide_operator.api import parse_spec
from tide_operator.control.lifecycle import LifecycleState, Phase, RecallObservation, TrainingStatus
from tide_operator.control.policy import PolicyState
from tide_operator.passes.sensors import (
    last_launch_time,
    pooled_drafts,
    read_sensors,
    recall_outcome,
    trainer_outcome,
)

RUN = "3fa9c2d1-r5"
SHIFT = 1000.0


def spec(pin: str | None = None, **pool: Any) -> Any:
    control: dict[str, Any] = {"draftPool": {"recallSampleThreshold": 100, **pool}}
    if pin is not None:
        control["draftPin"] = pin
    return parse_spec({"target": {"model": "m", "revision": "r1"}, "draft": {"initial": "s3://b/launch"},
                       "storage": {"s3": {"bucket": "tide"}}, "control": control})


def entry(version: str, served_at: float) -> PoolEntry:
    return PoolEntry(version=version, added_at=1.0, last_served_at=served_at)


class PoolRegistry:
    def __init__(self, pool: DraftPool | None, report: RecallReport | None = None,
                 error: Exception | None = None) -> None:
        self.index, self.report, self.error, self.reads = pool, report, error, 0

    def pool(self) -> tuple[DraftPool | None, str | None]:
        self.reads += 1
        return self.index, "etag"

    def recall_report(self, run_id: str) -> RecallReport | None:
        if self.error is not None:
            raise self.error
        return self.report

    def candidate_manifest(self, run_id: str) -> Any:
        raise AssertionError(f"a pooled version has no candidate manifest ({run_id})")


POOL = DraftPool(target_revision="r1", entries=(entry("initial", 5.0), entry("v1", 10.0), entry("v2", 30.0),
                                                entry("v3", 40.0)))
DUE = LifecycleState(phase=Phase.COLLECTING, shift_at=SHIFT, buffer_baseline=50)


def state(lifecycle: LifecycleState = DUE, **changes: Any) -> PolicyState:
    return PolicyState(lifecycle=replace(lifecycle, **changes))


def test_the_pool_is_the_other_drafts_most_recently_served_first_the_launch_draft_included() -> None:
    registry = PoolRegistry(POOL)
    assert pooled_drafts(registry, spec(), state(), "v3", buffer_samples=150)[0] == ("v2", "v1", "initial")  # type: ignore[arg-type]
    assert registry.reads == 1


def test_the_launch_draft_serving_is_not_offered() -> None:
    assert pooled_drafts(PoolRegistry(POOL), spec(), state(), "initial", 150)[0] == ("v3", "v2", "v1")  # type: ignore[arg-type]


def test_initial_is_not_offered_once_the_spec_names_no_launch_draft() -> None:
    """An index written while spec.draft.initial was set: neither the evaluation nor a canary could load it."""
    bootstrap = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}},
                            "control": {"draftPool": {"recallSampleThreshold": 100}}})
    assert pooled_drafts(PoolRegistry(POOL), bootstrap, state(), "v3", 150)[0] == ("v2", "v1")  # type: ignore[arg-type]


@pytest.mark.parametrize(("the_spec", "policy", "buffer"), [
    (spec(), state(phase=Phase.SERVING), 150),
    (spec(), state(phase=Phase.TRAINING), 150),
    (spec(), state(shift_at=None), 150),  # no shift: nothing to recall for
    (spec(), state(recalled_for_shift=SHIFT), 150),  # the pool was tried for this shift
    (spec(), state(retrain_at=SHIFT + 600), 150),  # ShiftPersists: training goes on
    (spec(), state(), 149),  # 99 of the 100 samples the evaluation scores on
    (spec(recall=False), state(), 150),
    (spec(pin="v1"), state(), 150),  # the pin serves: no recall
])
def test_pool_json_is_read_only_when_a_recall_could_be_due(the_spec: Any, policy: PolicyState, buffer: int) -> None:
    registry = PoolRegistry(POOL)
    assert pooled_drafts(registry, the_spec, policy, "v3", buffer)[0] == ()  # type: ignore[arg-type]
    assert registry.reads == 0


def test_a_pool_kept_for_another_target_offers_nothing() -> None:
    other = POOL.model_copy(update={"target_revision": "r0"})
    assert pooled_drafts(PoolRegistry(other), spec(), state(), "v3", 150)[0] == ()  # type: ignore[arg-type]


# ---- the evaluation Job while Recalling -------------------------------------------------------------------

class JobCluster:
    def __init__(self, jobs: list[dict[str, Any]]) -> None:
        self._jobs = jobs

    def jobs(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        wanted = dict(pair.split("=", 1) for pair in selector.split(","))
        return [j for j in self._jobs if all(j["metadata"]["labels"].get(k) == v for k, v in wanted.items())]


def job(name: str, run: str, kind: str, created: str = "2026-12-02T14:00:00Z", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": {"tide.dev/training-run": run, "tide.dev/job-kind": kind,
                                    "tide.dev/deployment": name.split("-", maxsplit=1)[0]}},
            "status": status}


RECALLING = state(phase=Phase.RECALLING, recall_run=RUN)
REPORT = RecallReport(run_id=RUN, target_revision="r1", served_version="v3", served_acceptance_length=1.6,
                      scores=(RecallScore(version="initial", acceptance_length=2.9),
                              RecallScore(version="v1", acceptance_length=2.4),
                              RecallScore(version="v2", acceptance_length=1.7)), eval_tokens=4096)
DEADLINE = [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]


@pytest.mark.parametrize(("jobs", "expected"), [
    ([], RecallObservation(RUN, TrainingStatus.MISSING)),
    ([job(f"other-eval-{RUN}", RUN, "evaluation", succeeded=1)], RecallObservation(RUN, TrainingStatus.MISSING)),
    ([job(f"chat-eval-{RUN}", RUN, "evaluation", active=1)], RecallObservation(RUN, TrainingStatus.RUNNING)),
    ([job(f"chat-eval-{RUN}", RUN, "evaluation", failed=1)], RecallObservation(RUN, TrainingStatus.FAILED)),
    ([job(f"chat-eval-{RUN}", RUN, "evaluation", failed=1, conditions=DEADLINE)],
     RecallObservation(RUN, TrainingStatus.DEADLINE_EXCEEDED)),
    # The best pooled draft, the launch draft included, against the served draft on the same samples.
    ([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)],
     RecallObservation(RUN, TrainingStatus.SUCCEEDED, "initial", 2.9, 1.6)),
])
def test_the_evaluation_jobs_outcome(jobs: list[dict[str, Any]], expected: RecallObservation) -> None:
    seen = recall_outcome("chat", "ns", RECALLING, JobCluster(jobs), PoolRegistry(None, REPORT))  # type: ignore[arg-type]
    assert seen == expected


def test_the_launch_draft_is_recalled_only_while_the_spec_names_one() -> None:
    """The pods and a canary load `initial` from spec.draft.initial: without it the best is a pooled vN."""
    succeeded = JobCluster([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)])
    seen = recall_outcome("chat", "ns", RECALLING, succeeded, PoolRegistry(None, REPORT),  # type: ignore[arg-type]
                          launch_draft=False)
    assert seen == RecallObservation(RUN, TrainingStatus.SUCCEEDED, "v1", 2.4, 1.6)


@pytest.mark.parametrize(("registry", "logged"), [
    (PoolRegistry(None, None), "is missing"),
    (PoolRegistry(None, REPORT.model_copy(update={"run_id": "3fa9c2d1-r4"})), "is run 3fa9c2d1-r4's"),
])
def test_a_succeeded_job_without_its_report_is_a_failure_said_so(registry: PoolRegistry, logged: str,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    succeeded = JobCluster([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)])
    with caplog.at_level(logging.WARNING):
        seen = recall_outcome("chat", "ns", RECALLING, succeeded, registry)  # type: ignore[arg-type]
    assert seen == RecallObservation(RUN, TrainingStatus.FAILED)
    assert logged in caplog.text


def test_an_unreachable_report_holds_the_pass() -> None:
    succeeded = JobCluster([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)])
    with pytest.raises(RegistryError):  # read_sensors: StorageUnreachable, read again next pass
        recall_outcome("chat", "ns", RECALLING, succeeded, PoolRegistry(None, error=RegistryError("503")))  # type: ignore[arg-type]


def test_no_recall_outcome_outside_recalling() -> None:
    jobs = JobCluster([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)])
    assert recall_outcome("chat", "ns", state(recall_run=RUN), jobs, PoolRegistry(None, REPORT)) is None  # type: ignore[arg-type]


def test_a_recalled_candidate_in_evaluating_reads_no_candidate_manifest() -> None:
    recalled = state(phase=Phase.EVALUATING, candidate="v1", candidate_acceptance_length=2.4,
                     candidate_recalled=True, candidate_baseline=1.6)
    assert trainer_outcome("chat", "ns", recalled, JobCluster([]), PoolRegistry(None)) is None  # type: ignore[arg-type]


def test_after_a_recall_the_buffer_counts_from_the_training_launch_before_it() -> None:
    jobs = JobCluster([job("chat-train-3fa9c2d1-r3", "3fa9c2d1-r3", "training", "2026-12-02T14:00:00Z"),
                       job("chat-train-3fa9c2d1-r4", "3fa9c2d1-r4", "training", "2026-12-02T14:10:00Z"),
                       job(f"chat-eval-{RUN}", RUN, "evaluation", "2026-12-02T15:00:00Z", succeeded=1)])
    after = state(run_counter=5, last_run=RUN)
    assert last_launch_time("chat", "ns", after, jobs) == 1796220600.0  # r4's creation, not 0 (every sample)


# ---- through read_sensors: the policy's Observation carries both ------------------------------------------

class NoSeries:
    def deployment(self, key: Any) -> None:
        return None  # no series: the Prometheus part is empty, the S3 and Job parts are what is tested


class PassRegistry(PoolRegistry):
    def promoted(self) -> tuple[PromotedPointer, str]:
        return PromotedPointer(version="v3", run_id="3fa9c2d1-r3", target_revision="r1",
                               updated_at="2026-12-03T00:00:00Z"), "etag"

    def list_captures(self) -> list[CaptureObject]:
        return [CaptureObject("ns/chat/captures/c1", 10, 1.0e9, 150)]


def test_read_sensors_fills_the_pool_and_the_recall_outcome() -> None:
    registry = PassRegistry(POOL, REPORT)
    evaluation = JobCluster([job(f"chat-eval-{RUN}", RUN, "evaluation", succeeded=1)])
    collecting = read_sensors("chat", "ns", spec(), state(), NoSeries(), registry, evaluation)  # type: ignore[arg-type]
    assert collecting.observation is not None
    assert (collecting.observation.pool, collecting.observation.recall) == (("v2", "v1", "initial"), None)
    recalling = read_sensors("chat", "ns", spec(), RECALLING, NoSeries(), registry, evaluation)  # type: ignore[arg-type]
    assert recalling.observation is not None
    assert recalling.observation.pool == ()
    # spec() names a launch draft: `initial`, the report's best, is recalled like a vN.
    assert recalling.observation.recall == RecallObservation(RUN, TrainingStatus.SUCCEEDED, "initial", 2.9, 1.6)
    assert registry.reads == 1  # pool.json once, in the pass a recall could be due


# ---- a return of traffic, from the capture objects' signatures --------------------------------------------------
def _signature(center: float) -> DomainSignature:
    return DomainSignature(mean=(center, -center), std=(1.0, 1.0), tokens=100, projection=PROJECTION)


AFTER_PROMOTION = LifecycleState(phase=Phase.COLLECTING, phase_since=2000.0, shift_at=SHIFT,
                                 recalled_for_shift=SHIFT, last_promotion_at=2000.0)
SIGNED_POOL = DraftPool(target_revision="r1", entries=(
    entry("initial", 5.0), entry("v1", 10.0).model_copy(update={"signature": _signature(1.0)}),
    entry("v2", 30.0).model_copy(update={"signature": _signature(5.0)})))


def _captures(center: float, at: float = 2100.0) -> list[CaptureObject]:
    return [CaptureObject(f"ns/chat/captures/c{i}", 10, at + i, 60, _signature(center)) for i in range(2)]


def test_collecting_after_a_promotion_reads_the_newest_captures_against_the_pool() -> None:
    registry = PoolRegistry(SIGNED_POOL)
    pool, traffic = pooled_drafts(registry, spec(), state(AFTER_PROMOTION), "v2", 0,  # type: ignore[arg-type]
                                  _captures(1.0))
    assert (pool, registry.reads) == (("v1", "initial"), 1)
    assert traffic is not None
    assert traffic.served == _signature(5.0)  # v2's training traffic
    assert traffic.pooled == (("v1", _signature(1.0)),)  # the launch draft has no signature to compare
    assert traffic.window.tokens == 200
    assert traffic.window.mean == pytest.approx((1.0, -1.0))


@pytest.mark.parametrize(("lifecycle", "captures"), [
    (AFTER_PROMOTION, _captures(1.0, at=1900.0)),  # captured before this phase: the round's old traffic
    (AFTER_PROMOTION, _captures(1.0)[:1]),  # 60 of the 100 requests the window needs
    (replace(AFTER_PROMOTION, last_promotion_at=900.0), _captures(1.0)),  # the shift's own recall is pending
    (replace(AFTER_PROMOTION, phase=Phase.TRAINING), _captures(1.0)),
])
def test_no_return_window_outside_collecting_after_a_promotion(lifecycle: LifecycleState,
                                                                captures: list[CaptureObject]) -> None:
    registry = PoolRegistry(SIGNED_POOL)
    assert pooled_drafts(registry, spec(), state(lifecycle), "v2", 0, captures) == ((), None)  # type: ignore[arg-type]
    assert registry.reads == 0
