"""Pods that missed a runtime switch (they started after it) are told again, and only they."""

from __future__ import annotations

from typing import Any

import pytest

from tide_contracts.serving_control import (
    CaptureCounters,
    CaptureState,
    ErrorCode,
    ServingControlError,
    ServingStatus,
    SpeculationState,
)
from tide_operator.adapters.fleet import Fleet, RestartRequired, ServingPod
from tide_operator.api import parse_spec
from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.control.placement import NodeInventory, Placement, PoolRequest, choose_pools
from tide_operator.manifests.pod import s3_uri
from tide_operator.manifests.serving import OFF_BANDS, launch_bands_of
from tide_operator.passes.control_loop import EffectError
from tide_operator.passes.effects import ClusterEffects
from tide_operator.passes.pod_convergence import Correction, DesiredPods, corrections

DEST = "s3://tide/team/chat/captures/"
DESIRED = DesiredPods(speculation=False, capture=True, sampling_rate=0.5, destination=DEST)


def status(*, speculation: bool = False, runtime: bool = True, capture: bool = True, rate: float = 0.5,
           destination: str | None = DEST, supported: bool = True, bands: list | None = None) -> ServingStatus:
    return ServingStatus(
        contract_version=1, plugin_version="0.1", vllm_version="0.32.0", engine_supported=supported,
        model_name="chat", draft=None,
        speculation=SpeculationState(enabled=speculation, runtime_control=runtime, num_speculative_tokens=3,
                                     tokens_per_batch_size=bands),
        capture=CaptureState(enabled=capture, sampling_rate=rate, destination=destination,
                             counters=CaptureCounters()))


@pytest.mark.parametrize(("reported", "expected"), [
    (status(), None),  # already as desired
    (status(speculation=True, capture=False), Correction("p", speculation=False, capture=True)),  # fresh pod
    (status(speculation=True, runtime=False), None),  # needs a restart, not a call
    (status(rate=1.0), Correction("p", capture=True)),
    (status(destination="s3://other/captures/"), Correction("p", capture=True)),
    (status(speculation=True, capture=False, supported=False), None),  # inert plugin: nothing to switch
    (None, None),  # did not answer: the next switch that fails on it says so
])
def test_only_a_pod_that_differs_from_the_desired_state_is_corrected(reported: ServingStatus | None,
                                                                    expected: Correction | None) -> None:
    assert corrections({"p": reported}, DESIRED) == ([expected] if expected else [])


def test_capture_settings_do_not_matter_while_capture_is_off() -> None:
    off = DesiredPods(speculation=True, capture=False, sampling_rate=0.5, destination=None)
    assert corrections({"p": status(speculation=True, capture=False, rate=1.0, destination=None)}, off) == []
    assert Correction("p", speculation=True, capture=False).describe() == "p: speculation on, capture off"


class FakePod:
    def __init__(self, reported: ServingStatus) -> None:
        self.reported, self.calls = reported, []

    def status(self) -> ServingStatus:
        return self.reported

    def set_speculation(self, request: Any) -> None:
        self.calls.append(("speculation", request.enabled, request.tokens_per_batch_size))

    def set_capture(self, request: Any) -> None:
        self.calls.append(("capture", request.enabled, request.sampling_rate, request.destination))


def test_the_fleet_switches_only_the_pod_that_started_late() -> None:
    old, new = FakePod(status()), FakePod(status(speculation=True, capture=False))
    clients = {"http://10.0.0.1:8000": old, "http://10.0.0.2:8000": new}
    fleet = Fleet([ServingPod("chat-a", "10.0.0.1", True), ServingPod("chat-b", "10.0.0.2", True)], 8000, "t",
                  client_factory=lambda url, token, timeout_s: clients[url])
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}},
                       "control": {"capture": {"samplingPercent": 50}}})
    effects = ClusterEffects("chat", "team", spec, None, None, None, fleet, None, None)  # type: ignore[arg-type]
    destination = s3_uri("chat", "team", spec.storage.s3, "captures") + "/"
    old.reported = status(destination=destination)

    assert effects.converge(speculation=False, capture=True) == ["chat-b: speculation off, capture on"]
    assert old.calls == []
    assert new.calls == [("speculation", False, None), ("capture", True, 0.5, destination)]

    # Speculating with the policy's bands: a pod on the launch table (or other bands) gets them.
    bands = ((1, 8, 3), (9, 256, 1))
    old.reported = status(speculation=True, destination=destination, bands=[list(b) for b in bands])
    new.reported, new.calls = status(speculation=True, destination=destination), []
    assert effects.converge(speculation=True, capture=True, bands=bands) == ["chat-b: speculation on"]
    assert new.calls == [("speculation", True, [(1, 8, 3), (9, 256, 1)])]
    assert old.calls == []


# -- pods that switch speculation only by a restart ----------------------------------------------------


class RestartOnlyPod(FakePod):
    def set_speculation(self, request: Any) -> None:
        raise ServingControlError(409, ErrorCode.RESTART_REQUIRED, "launched without --scheduler-cls")


class FakeCluster:
    def __init__(self) -> None:
        self.live: dict[str, dict] = {}
        self.applied: list[dict] = []

    def deployment(self, namespace: str, name: str) -> dict | None:
        return self.live.get(name)

    def apply(self, desired: dict) -> None:
        self.applied.append(desired)
        self.live[desired["metadata"]["name"]] = desired


def h100_placement() -> Placement:
    nodes = [NodeInventory(f"h100-{i}", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, {"nvidia.com/gpu": 8})
             for i in range(2)]
    return choose_pools(nodes, DEFAULT_CATALOG, PoolRequest(("H100",), 2, 1), PoolRequest(("H100",), 1, 1))


def restart_only_effects(cluster: FakeCluster, *pods: FakePod) -> ClusterEffects:
    clients = {f"http://10.0.0.{i}:8000": pod for i, pod in enumerate(pods, 1)}
    fleet = Fleet([ServingPod(f"chat-{i}", f"10.0.0.{i}", True) for i in range(1, len(pods) + 1)], 8000, "t",
                  client_factory=lambda url, token, timeout_s: clients[url])
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "draft": {"initial": "/drafts/launch"},
                       "storage": {"s3": {"bucket": "tide"}}})
    return ClusterEffects("chat", "team", spec, h100_placement(), OperatorConfig(), cluster,  # type: ignore[arg-type]
                          fleet, None, lambda child: child)


def test_pods_without_runtime_switching_are_rolled_once_with_the_bands_and_it_is_said() -> None:
    cluster = FakeCluster()
    effects = restart_only_effects(cluster, RestartOnlyPod(status()), RestartOnlyPod(status()))
    off = act.SetSpeculation(False, 0, None, "SpeedupBelowMargin", "speedup 0.91 < 1.02")
    why = effects.set_speculation(off)
    assert why is not None
    assert "rolling them with speculation off" in why
    assert "409 restart_required" in why
    assert {d["kind"] for d in cluster.applied} == {"ConfigMap", "Deployment"}
    deployment = cluster.live["chat-vllm"]
    assert launch_bands_of(deployment) == OFF_BANDS

    cluster.applied.clear()  # the old pods still refuse while they are replaced: nothing to roll again
    assert effects.set_speculation(off) is None
    assert cluster.applied == []

    bands = ((1, 8, 3), (9, 256, 1))
    on = effects.set_speculation(act.SetSpeculation(True, 3, bands, "SpeedupAboveMargin", "1.31 > 1.05"))
    assert on is not None
    assert "on with 2 batch-size band(s)" in on
    assert launch_bands_of(cluster.live["chat-vllm"]) == bands


def test_pods_that_switch_live_are_never_rolled_and_mixed_failures_stay_errors() -> None:
    cluster = FakeCluster()
    assert restart_only_effects(cluster, FakePod(status())).set_speculation(
        act.SetSpeculation(False, 0, None, "r", "m")) is None
    assert cluster.applied == []

    class Unreachable(FakePod):
        def set_speculation(self, request: Any) -> None:
            raise ServingControlError(0, ErrorCode.ENGINE_ERROR, "unreachable")

    effects = restart_only_effects(cluster, RestartOnlyPod(status()), Unreachable(status()))
    with pytest.raises(EffectError) as err:
        effects.set_speculation(act.SetSpeculation(False, 0, None, "r", "m"))
    assert not isinstance(err.value, RestartRequired)
    assert cluster.applied == []


def test_a_serving_group_with_its_own_cost_profile_gets_its_own_table_and_converges_on_it() -> None:
    """The switch is the fleet's; the MI250 group's dearer draft makes it draft fewer tokens, and a pod of it
    that reports the fleet's table is told its own."""
    from tide_operator.control.cost_model import DEFAULT_PROFILE, CostProfile, tokens_per_batch_size_table

    h100 = FakePod(status(speculation=True, capture=False, destination=None))
    mi250 = FakePod(status(speculation=True, capture=False, destination=None))
    clients = {"http://10.0.0.1:8000": h100, "http://10.0.0.2:8000": mi250}
    fleet = Fleet([ServingPod("chat-h", "10.0.0.1", True, gpu_class="H100"),
                   ServingPod("chat-m", "10.0.0.2", True, gpu_class="MI250")], 8000, "t",
                  client_factory=lambda url, token, timeout_s: clients[url])
    spec = parse_spec({"target": {"model": "m", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}})
    dear = CostProfile.from_spec_points([(1, 400, 110), (64, 300, 180)])
    effects = ClusterEffects("chat", "team", spec, None, None, None, fleet, None, None,  # type: ignore[arg-type]
                             class_profiles={"MI250": dear})
    a = 0.7
    fleet_table = tuple(tuple(r) for r in tokens_per_batch_size_table(a, 3, 64, DEFAULT_PROFILE, 1.02))
    own = tuple(tuple(r) for r in tokens_per_batch_size_table(a, 3, 64, dear, 1.02))
    assert own != fleet_table  # the profile matters at this acceptance

    effects.set_speculation(act.SetSpeculation(True, 3, fleet_table, "r", "m", acceptance=a))
    assert h100.calls == [("speculation", True, [tuple(b) for b in fleet_table])]
    assert mi250.calls == [("speculation", True, [tuple(b) for b in own])]

    h100.calls, mi250.calls = [], []
    h100.reported = status(speculation=True, capture=False, destination=None, bands=[list(b) for b in fleet_table])
    mi250.reported = status(speculation=True, capture=False, destination=None, bands=[list(b) for b in fleet_table])
    fixed = effects.converge(speculation=True, capture=False, bands=fleet_table, acceptance=a)
    assert fixed == ["chat-m: speculation on"]
    assert (h100.calls, mi250.calls) == ([], [("speculation", True, [tuple(b) for b in own])])
    # Without the acceptance the table was made for (a probe's table) every pod runs the fleet's.
    mi250.calls = []
    assert effects.converge(speculation=True, capture=False, bands=fleet_table) == []
