"""A run launched after a shift claims the shards captured since the shift (issue 15, mechanism 5a)."""

from __future__ import annotations

from typing import Any

import pytest

from tide_contracts.registry import CaptureObject
from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.passes import effects as effects_module
from tide_operator.passes.capture_retention import claim_for_evaluation, claim_shards
from tide_operator.passes.effects import ClusterEffects

NOW = 1_000_000.0
SPEC = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide-b"}},
                   "draft": {"initial": "s3://tide-b/launch"},
                   "control": {"training": {"sampleThreshold": 100, "timeout": "30m"}}})


def shard(name: str, age_s: float, samples: int) -> CaptureObject:
    return CaptureObject(f"ns/chat/captures/{name}", 1000, NOW - age_s, samples)


class FakeRegistry:
    def __init__(self, captures: list[CaptureObject]) -> None:
        self.captures, self.claims = captures, {}

    def list_captures(self) -> list[CaptureObject]:
        return self.captures

    def put_claim(self, run_id: str, shards: list[CaptureObject], *, created_at: float, expires_at: float) -> str:
        self.claims[run_id] = [s.key.rsplit("/", 1)[1] for s in shards]
        return f"ns/chat/claims/{run_id}.json"

    def list_candidates(self) -> list[str]:
        return []

    def promoted(self) -> tuple[None, None]:
        return None, None


BUFFER = [shard("old-domain-1", 1200, 60), shard("old-domain-2", 900, 60), shard("new-domain-1", 500, 60),
          shard("new-domain-2", 100, 60)]


@pytest.mark.parametrize(("since", "claimed"), [
    (None, ["old-domain-1", "old-domain-2", "new-domain-1", "new-domain-2"]),  # no shift: the buffer, as before
    (NOW - 600, ["new-domain-1", "new-domain-2"]),  # 120 samples since the shift >= sampleThreshold 100
    (NOW - 300, ["new-domain-1", "new-domain-2"]),  # 60 < 100: the newest older shard tops it up
])
def test_the_claim_starts_at_the_shift(since: float | None, claimed: list[str]) -> None:
    registry = FakeRegistry(BUFFER)
    deadline = claim_shards(registry, SPEC, OperatorConfig(), "r1", NOW, captured_since=since)  # type: ignore[arg-type]
    assert registry.claims["r1"] == claimed
    assert deadline == 1800


def test_launch_training_claims_since_the_time_the_action_carries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the checked action's number reaches the claim; the Job's arguments are built as before."""
    seen: dict[str, Any] = {}

    def fake_claim(registry: Any, spec: Any, config: Any, run_id: str, now_s: float, captured_since: Any = None) -> int:
        seen.update(run_id=run_id, captured_since=captured_since)
        return 600

    def fake_job(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen["job_kwargs"] = sorted(kwargs)
        return {"metadata": {"name": "chat-train-r2"}}

    monkeypatch.setattr(effects_module, "claim_shards", fake_claim)
    monkeypatch.setattr(effects_module, "build_trainer_job", fake_job)
    created: list[dict[str, Any]] = []
    cluster = type("FakeCluster", (), {"create_owned": lambda self, job: created.append(job)})()
    effects = ClusterEffects("chat", "ns", SPEC, placement=None, config=OperatorConfig(),  # type: ignore[arg-type]
                             cluster=cluster, fleet=None, registry=FakeRegistry([]), adopt=lambda o: o)  # type: ignore[arg-type]
    effects.launch_training(act.LaunchTraining("r2", "ShiftPersists", "", captured_since=NOW - 600))
    assert (seen["run_id"], seen["captured_since"]) == ("r2", NOW - 600)
    assert seen["job_kwargs"] == ["deadline_s", "operator_config", "parent_draft", "run_id"]
    assert created == [{"metadata": {"name": "chat-train-r2"}}]


def test_a_recall_evaluation_claims_the_shift_topped_up_only_to_its_own_threshold() -> None:
    """recallSampleThreshold, not sampleThreshold: the evaluation scores the new traffic, not the old; its claim
    expires with the Job's deadline."""
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide-b"}},
                       "draft": {"initial": "s3://tide-b/launch"},
                       "control": {"training": {"sampleThreshold": 1000},
                                   "draftPool": {"recallSampleThreshold": 100}}})
    registry = FakeRegistry(BUFFER)
    deadline = claim_for_evaluation(registry, spec, OperatorConfig(), "r3", NOW,  # type: ignore[arg-type]
                                    captured_since=NOW - 300, deadline_s=3600)
    assert registry.claims["r3"] == ["new-domain-1", "new-domain-2"]  # 60 since the shift + the newest older
    assert deadline == 3600
