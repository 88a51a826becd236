"""Start without a draft, through the effects: the bootstrap head's pods stay at K=0 except a first
draft's canary, whose rollback returns to the head; speculation on names K explicitly for them."""

from __future__ import annotations

from typing import Any

from test_draft_convergence import FakePod, FakeRegistry, pointer

from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.api import parse_spec
from tide_operator.control import actions as act
from tide_operator.manifests.trainer import bootstrap_location
from tide_operator.passes.effects import ClusterEffects


def effects(pods: dict[str, FakePod], registry: FakeRegistry, initial: str | None = "/drafts/launch") -> ClusterEffects:
    """Effects on fake pods; ``initial=None``: a deployment started without a draft (the bootstrap head)."""
    ips = {name: f"10.0.0.{i}" for i, name in enumerate(sorted(pods), 1)}
    clients = {f"http://{ips[n]}:8081": pod for n, pod in pods.items()}
    fleet = Fleet([ServingPod(n, ips[n], True) for n in sorted(pods)], 8081, "t",
                  client_factory=lambda url, token, timeout_s: clients[url])
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "draft": {"initial": initial} if initial else {},
                       "storage": {"s3": {"bucket": "tide"}}})
    return ClusterEffects("chat", "team", spec, None, None, None, fleet, registry, None)  # type: ignore[arg-type]


class SwitchPod(FakePod):
    def __init__(self, version: str | None) -> None:
        super().__init__(version)
        self.switches: list[tuple[bool, Any]] = []

    def set_speculation(self, request: Any) -> None:
        bands = [tuple(b) for b in request.tokens_per_batch_size] if request.tokens_per_batch_size else None
        self.switches.append((request.enabled, bands))


def test_a_first_draft_canary_drafts_and_its_rollback_returns_to_the_head_at_k0() -> None:
    pods = {"chat-a": SwitchPod("initial"), "chat-b": SwitchPod("initial")}
    fx = effects(pods, FakeRegistry(None), initial=None)  # type: ignore[arg-type]
    head = bootstrap_location("chat", "team", fx.spec)
    fx.start_canary(act.StartCanary("r1", 1, "CandidateBetter", "m", ("chat-a",)))
    assert pods["chat-a"].switches == [(True, [(1, 1 << 20, 3)])]  # explicit K: "launch table" is K=0
    assert pods["chat-b"].switches == []  # the control pods stay at K=0
    fx.roll_back(act.RollBack("r1", "CanaryFailed", "m", ("chat-a",)))
    assert pods["chat-a"].loads[-1] == (head, None, None)
    assert pods["chat-a"].switches[-1] == (False, None)


def test_later_canaries_and_deployments_with_a_draft_do_not_switch_canary_pods() -> None:
    pods = {"chat-a": SwitchPod("v1")}
    effects(pods, FakeRegistry(pointer("v1")), initial=None).start_canary(  # type: ignore[arg-type]
        act.StartCanary("r2", 1, "CandidateBetter", "m", ("chat-a",)))
    initial = {"chat-a": SwitchPod("initial")}
    effects(initial, FakeRegistry(None)).start_canary(  # type: ignore[arg-type]
        act.StartCanary("r1", 1, "CandidateBetter", "m", ("chat-a",)))
    assert pods["chat-a"].switches == initial["chat-a"].switches == []


def test_speculation_on_for_the_heads_pods_names_k_explicitly() -> None:
    pods = {"chat-a": SwitchPod("v1")}
    fx = effects(pods, FakeRegistry(None), initial=None)  # type: ignore[arg-type]
    fx.set_speculation(act.SetSpeculation(True, 3, None, "SpeedupAboveMargin", "m"))
    assert pods["chat-a"].switches == [(True, [(1, 1 << 20, 3)])]
    bands = ((1, 8, 3), (9, 256, 1))
    fx.set_speculation(act.SetSpeculation(True, 3, bands, "SpeedupAboveMargin", "m"))
    assert pods["chat-a"].switches[-1] == (True, list(bands))


def test_without_a_pointer_the_pods_converge_to_the_head() -> None:
    pods = {"chat-a": SwitchPod("v2")}  # e.g. a pod of a TideDeployment of the same name that was deleted
    fx = effects(pods, FakeRegistry(None), initial=None)  # type: ignore[arg-type]
    assert fx.converge_drafts(None) == ["chat-a: draft v2 -> initial"]
    assert pods["chat-a"].loads == [(bootstrap_location("chat", "team", fx.spec), None, None)]
