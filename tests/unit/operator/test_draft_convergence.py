"""Drafts converge by version: each ready pod serves the pointer (the candidate on canary pods); the
canary and its rollback touch exactly the recorded pods."""

from __future__ import annotations

from typing import Any

import pytest

from tide_contracts.registry import PromotedPointer
from tide_contracts.serving_control import (
    CaptureCounters,
    CaptureState,
    DraftInfo,
    ServingStatus,
    SpeculationState,
)
from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.api import parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.control.policy import Observation, PolicyState
from tide_operator.manifests import labels
from tide_operator.passes.control_loop import SensorReading
from tide_operator.passes.control_step import _with_fleet, make_fleet
from tide_operator.passes.effects import ClusterEffects
from tide_operator.passes.pod_convergence import (
    CanaryPods,
    DesiredDrafts,
    DraftLoad,
    DraftSwap,
    draft_swaps,
    swap_budget,
)

SHA = "a" * 64
V3 = DraftLoad("v3", "s3://tide/team/chat/drafts/v3", "v3", SHA)
CANDIDATE = DraftLoad("3fa9c2d1-r4", "s3://tide/team/chat/candidates/3fa9c2d1-r4")


def status(version: str | None, *, supported: bool = True) -> ServingStatus:
    draft = None if version is None else DraftInfo(
        version=version, target_revision="r1", source="x", hidden_size=8, draft_vocab_size=8, aux_layer_ids=[1],
        num_speculative_tokens=3)
    return ServingStatus(
        contract_version=1, plugin_version="0.1", vllm_version="0.32.0", engine_supported=supported,
        model_name="chat", draft=draft,
        speculation=SpeculationState(enabled=True, runtime_control=True, num_speculative_tokens=3),
        capture=CaptureState(enabled=False, sampling_rate=0.1, destination=None, counters=CaptureCounters()))


@pytest.mark.parametrize(("reported", "desired", "limit", "expected"), [
    ({"a": status("v3"), "b": status("v3")}, DesiredDrafts(V3), 2, []),
    ({"a": status("v3"), "b": status("v2")}, DesiredDrafts(V3), 2, [DraftSwap("b", V3, "v2")]),  # a straggler
    ({"a": status("initial")}, DesiredDrafts(V3), 1, [DraftSwap("a", V3, "initial")]),  # started before the flip
    # During a canary its pods serve the candidate, the others the pointer.
    ({"a": status("3fa9c2d1-r4"), "b": status("v3")}, DesiredDrafts(V3, CANDIDATE, frozenset({"a"})), 2, []),
    ({"a": status("v3"), "b": status("3fa9c2d1-r4")}, DesiredDrafts(V3, CANDIDATE, frozenset({"a"})), 2,
     [DraftSwap("a", CANDIDATE, "v3"), DraftSwap("b", V3, "3fa9c2d1-r4")]),
    # Never swapped: did not answer, inert plugin, launched without a draft (needs a restart).
    ({"a": None, "b": status("v2", supported=False), "c": status(None)}, DesiredDrafts(V3), 3, []),
    # Bounded per pass, in name order.
    ({p: status("v2") for p in "dcba"}, DesiredDrafts(V3), 2, [DraftSwap("a", V3, "v2"), DraftSwap("b", V3, "v2")]),
])
def test_a_pod_whose_draft_version_differs_is_swapped(reported: dict, desired: DesiredDrafts, limit: int,
                                                     expected: list[DraftSwap]) -> None:
    assert draft_swaps(reported, desired, limit) == expected


@pytest.mark.parametrize(("ready", "budget"), [(0, 1), (1, 1), (4, 1), (5, 2), (8, 2), (64, 16)])
def test_a_quarter_of_the_ready_pods_at_most_one_per_pass_at_least(ready: int, budget: int) -> None:
    assert swap_budget(ready) == budget


def test_a_swap_names_the_pod_and_both_versions() -> None:
    assert DraftSwap("chat-vllm-b", V3, "v2").describe() == "chat-vllm-b: draft v2 -> v3"


# ---- through the effects: the registry's pointer, the pods' control routes -----------------------


LAUNCH_SOURCE = "/drafts/launch"  # spec.draft.initial, inside the image


class FakePod:
    def __init__(self, version: str | None) -> None:
        self.reported, self.loads = status(version), []

    def status(self) -> ServingStatus:
        return self.reported

    def load_draft(self, request: Any) -> None:
        self.loads.append((request.source, request.version, request.manifest_sha256))
        # As the plugin: "initial" for its launch draft, else the manifest's version, else the source's last
        # path segment (a candidate's run id).
        named = request.version or request.source.rstrip("/").rsplit("/", 1)[-1]
        self.reported = status("initial" if request.source == LAUNCH_SOURCE else named)


class FakeRegistry:
    def __init__(self, pointer: PromotedPointer | None) -> None:
        self.pointer, self.rejected = pointer, []

    def promoted(self) -> tuple[PromotedPointer | None, str | None]:
        return self.pointer, "etag"

    def record_rejection(self, candidate: str, **_: object) -> None:
        self.rejected.append(candidate)


def pointer(version: str = "v3", revision: str = "r1") -> PromotedPointer:
    return PromotedPointer(version=version, run_id="3fa9c2d1-r3", target_revision=revision,
                           updated_at="2026-12-03T00:00:00Z", manifest_sha256=SHA)


def effects(pods: dict[str, FakePod], registry: FakeRegistry, ready: set[str] | None = None,
            lent: frozenset[str] = frozenset()) -> ClusterEffects:
    ips = {name: f"10.0.0.{i}" for i, name in enumerate(sorted(pods), 1)}
    clients = {f"http://{ips[n]}:8081": pod for n, pod in pods.items()}
    fleet = Fleet([ServingPod(n, ips[n], ready is None or n in ready, n in lent) for n in sorted(pods)], 8081, "t",
                  client_factory=lambda url, token, timeout_s: clients[url])
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "draft": {"initial": LAUNCH_SOURCE},
                       "storage": {"s3": {"bucket": "tide"}}})
    return ClusterEffects("chat", "team", spec, None, None, None, fleet, registry, None)  # type: ignore[arg-type]


def test_a_pod_that_started_before_the_pointer_flip_gets_the_promoted_draft_pinned_by_sha() -> None:
    pods = {"chat-a": FakePod("v3"), "chat-b": FakePod("v2")}
    swapped = effects(pods, FakeRegistry(pointer())).converge_drafts(None)
    assert swapped == ["chat-b: draft v2 -> v3"]
    assert pods["chat-b"].loads == [("s3://tide/team/chat/drafts/v3", "v3", SHA)]
    assert pods["chat-a"].loads == []


def test_during_a_canary_a_restarted_canary_pod_gets_the_candidate_back() -> None:
    pods = {"chat-a": FakePod("v3"), "chat-b": FakePod("v3")}
    swapped = effects(pods, FakeRegistry(pointer())).converge_drafts(CanaryPods("3fa9c2d1-r4", ("chat-a",)))
    assert swapped == ["chat-a: draft v3 -> 3fa9c2d1-r4"]
    assert pods["chat-a"].loads == [("s3://tide/team/chat/candidates/3fa9c2d1-r4", None, None)]
    assert pods["chat-b"].loads == []


def test_without_a_pointer_the_launch_draft_is_served() -> None:
    pods = {"chat-a": FakePod("v2")}
    assert effects(pods, FakeRegistry(None)).converge_drafts(None) == ["chat-a: draft v2 -> initial"]
    assert pods["chat-a"].loads == [("/drafts/launch", None, None)]


def test_a_recreated_deployment_serves_the_pointer_under_its_prefix_only_for_its_target_revision() -> None:
    """The old TideDeployment of this name left promoted.json for revision r0: not for this one's r1."""
    pods = {"chat-a": FakePod("v3")}
    assert effects(pods, FakeRegistry(pointer("v3", revision="r0"))).converge_drafts(None) == [
        "chat-a: draft v3 -> initial"]
    same = {"chat-a": FakePod("initial")}
    assert effects(same, FakeRegistry(pointer("v3", revision="r1"))).converge_drafts(None) == [
        "chat-a: draft initial -> v3"]


def test_the_canary_loads_and_the_rollback_swaps_back_exactly_the_recorded_pods() -> None:
    pods = {n: FakePod("v3") for n in ("chat-a", "chat-b", "chat-c")}
    registry = FakeRegistry(pointer())
    fx = effects(pods, registry, ready={"chat-b", "chat-c"})  # chat-a is first by name but not ready
    fx.start_canary(act.StartCanary("3fa9c2d1-r4", 1, "CandidateBetter", "m", ("chat-c",)))
    assert [n for n, p in pods.items() if p.loads] == ["chat-c"]
    for pod in pods.values():
        pod.loads.clear()
    # chat-c and a pod that is gone since; the first ready pod by name (chat-b) is not touched.
    fx.roll_back(act.RollBack("3fa9c2d1-r4", "CanaryFailed", "m", ("chat-c", "chat-gone")))
    assert {n: p.loads for n, p in pods.items()} == {
        "chat-a": [], "chat-b": [], "chat-c": [("s3://tide/team/chat/drafts/v3", "v3", SHA)]}
    assert registry.rejected == ["3fa9c2d1-r4"]


class CountingPod(FakePod):
    def __init__(self, version: str, max_num_seqs: int | None) -> None:
        super().__init__(version)
        self.reported = self.reported.model_copy(update={"max_num_seqs": max_num_seqs})
        self.asked = 0

    def status(self) -> ServingStatus:
        self.asked += 1
        return self.reported

    def load_draft(self, request: Any) -> None:
        self.loads.append((request.source, request.version, request.manifest_sha256))  # keeps reporting its version


def test_one_pass_reads_the_pods_once_until_one_is_told_something() -> None:
    pods = {"chat-a": CountingPod("v3", 64), "chat-b": CountingPod("v2", None)}
    fx = effects(pods, FakeRegistry(pointer()))  # type: ignore[arg-type]
    reading, cap = _with_fleet(SensorReading(Observation()), fx.fleet, PolicyState())
    assert reading.observation is not None
    assert (reading.observation.ready_pods, cap) == (("chat-a", "chat-b"), 64)
    assert fx.converge_drafts(None) == ["chat-b: draft v2 -> v3"]  # the same reading: not asked again
    assert [p.asked for p in pods.values()] == [1, 1]
    assert fx.converge_drafts(None) == ["chat-b: draft v2 -> v3"]  # told to load: read afresh (fake keeps v2)
    assert [p.asked for p in pods.values()] == [2, 2]
    held, cap = _with_fleet(SensorReading(None, "prometheus down"), fx.fleet, PolicyState(table=((1, 48, 2),)))
    assert (held.observation, cap) == (None, 48)


def test_a_lent_pod_serves_and_converges_but_never_carries_a_canary() -> None:
    pods = {"chat-a": CountingPod("v3", 64), "chat-lent-b": CountingPod("v2", 32)}
    fx = effects(pods, FakeRegistry(pointer()), lent=frozenset({"chat-lent-b"}))  # type: ignore[arg-type]
    reading, cap = _with_fleet(SensorReading(Observation()), fx.fleet, PolicyState())
    assert reading.observation is not None
    assert (reading.observation.ready_pods, cap) == (("chat-a",), 32)  # its batch cap still counts
    assert fx.converge_drafts(None) == ["chat-lent-b: draft v2 -> v3"]


def test_with_serving_groups_only_the_fastest_groups_pods_carry_a_canary() -> None:
    """A canary on an MI250 pod would read as a throughput loss against the H100s and roll back a good draft."""
    from dataclasses import replace

    pods = {"chat-vllm-h100-a": CountingPod("v3", 64), "chat-vllm-mi250-b": CountingPod("v3", 32)}
    fx = effects(pods, FakeRegistry(pointer()))  # type: ignore[arg-type]
    fx.fleet.pods = [replace(p, gpu_class="H100" if "h100" in p.name else "MI250") for p in fx.fleet.pods]
    reading, cap = _with_fleet(SensorReading(Observation()), fx.fleet, PolicyState(), canary_class="H100")
    assert reading.observation is not None
    assert (reading.observation.ready_pods, cap) == (("chat-vllm-h100-a",), 32)
    everyone, _ = _with_fleet(SensorReading(Observation()), fx.fleet, PolicyState())
    assert everyone.observation is not None
    assert everyone.observation.ready_pods == ("chat-vllm-h100-a", "chat-vllm-mi250-b")


def test_the_fleet_knows_lent_pods_by_their_serving_group_label() -> None:
    def pod(name: str, **extra: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "labels": {"app.kubernetes.io/name": "vllm", **extra}},
                "status": {"podIP": "10.0.0.9", "conditions": [{"type": "Ready", "status": "True"}]}}

    class PodCluster:
        def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
            return [pod("chat-vllm-a"), pod("chat-lent-b", **{labels.SERVING_GROUP_LABEL: labels.SERVING_GROUP_LENT})]

    fleet = make_fleet("chat", "team", OperatorConfig(), PodCluster(), ("t",))  # type: ignore[arg-type]
    assert [(p.name, p.lent) for p in fleet.pods] == [("chat-lent-b", True), ("chat-vllm-a", False)]
