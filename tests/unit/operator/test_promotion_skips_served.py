"""A promotion or pointer flip that is retried loads the draft only on pods not already serving it: a
pod that reports the version (of this target revision) is skipped, a pod whose status cannot be read
is tried."""

from __future__ import annotations

from typing import Any

from test_draft_convergence import FakePod, FakeRegistry, effects, pointer, status

from tide_contracts.registry import Manifest, PromotedPointer
from tide_contracts.serving_control import ServingStatus
from tide_operator.control import actions as act


class PromotingRegistry(FakeRegistry):
    """promote() is idempotent per run: a retry finds the pointer already moved and returns it."""

    def promote(self, candidate: str, **_: Any) -> PromotedPointer:
        self.pointer = pointer("v3")
        return self.pointer

    def draft_manifest(self, version: str) -> Manifest:
        return Manifest(kind="draft", run_id="3fa9c2d1-r3", version=version, created_at="2026-12-03T00:00:00Z",
                        target_revision="r1", files={})

    def record_served(self, version: str, **_: Any) -> list[str]:
        self.served = [*getattr(self, "served", []), version]
        return []


class Silent(FakePod):
    def status(self) -> ServingStatus:
        raise OSError("connection refused")


class OtherRevision(FakePod):
    def __init__(self) -> None:
        super().__init__("v3")
        self.reported = status("v3").model_copy(
            update={"draft": status("v3").draft.model_copy(update={"target_revision": "r0"})})  # type: ignore[union-attr]


def loaded(pods: dict[str, FakePod]) -> dict[str, int]:
    return {name: len(pod.loads) for name, pod in sorted(pods.items())}


def test_a_promotion_retry_loads_only_the_pods_not_yet_on_the_new_version() -> None:
    pods = {"chat-a": FakePod("v3"), "chat-b": FakePod("v2"), "chat-c": Silent("v2"), "chat-d": OtherRevision()}
    registry = PromotingRegistry(pointer("v2"))
    fx = effects(pods, registry)
    assert fx.promote(act.Promote("3fa9c2d1-r3", "CanarySuccessful", "beat the control")) is None
    assert registry.served == ["v3"]  # the retry touches the pool's entry again: no harm
    # a serves v3 already; b serves v2; c did not answer its status (tried); d serves a v3 of another revision.
    assert loaded(pods) == {"chat-a": 0, "chat-b": 1, "chat-c": 1, "chat-d": 1}
    assert pods["chat-b"].loads == [("s3://tide/team/chat/drafts/v3", "v3", "a" * 64)]


def test_a_pointer_flip_retried_after_a_pod_was_away_swaps_only_that_pod() -> None:
    pods = {"chat-a": FakePod("v3"), "chat-b": FakePod("v4")}
    fx = effects(pods, PromotingRegistry(pointer("v3")))
    flip = act.FlipPointer("v3", rollback=True, reason="ManualRollback", message="by hand")
    assert fx.flip_pointer(flip) == ("v3", "v3")
    assert loaded(pods) == {"chat-a": 0, "chat-b": 1}


def test_a_rollback_returns_the_canary_pods_and_skips_none_of_them() -> None:
    pods = {"chat-a": FakePod("3fa9c2d1-r4"), "chat-b": FakePod("v3")}
    fx = effects(pods, PromotingRegistry(pointer("v3")))
    fx.roll_back(act.RollBack("3fa9c2d1-r4", "CanaryFailed", "slower", ("chat-a",)))
    assert loaded(pods) == {"chat-a": 1, "chat-b": 0}


def test_a_canary_start_retried_loads_the_candidate_only_where_it_is_not_yet() -> None:
    pods = {"chat-a": FakePod("3fa9c2d1-r4"), "chat-b": FakePod("v3"), "chat-c": FakePod("v3")}
    fx = effects(pods, PromotingRegistry(pointer("v3")))
    fx.start_canary(act.StartCanary("3fa9c2d1-r4", 2, "CandidateBetter", "m", ("chat-a", "chat-b")))
    assert loaded(pods) == {"chat-a": 0, "chat-b": 1, "chat-c": 0}
    assert pods["chat-b"].loads == [("s3://tide/team/chat/candidates/3fa9c2d1-r4", None, None)]
