"""The fleet split (issue 17): what each placement serves, and when the training class is lent."""

from __future__ import annotations

import pytest

from tide_operator.control.fleet import (
    ClassGroup,
    FleetInput,
    LendReason,
    LendTiming,
    Role,
    Routing,
    decide_fleet,
    fleet_rate,
)

H100 = ClassGroup("H100", replicas=2, gpus_per_replica=4, inference_throughput=6.76, speedup=1.15)
MI250 = ClassGroup("MI250", replicas=1, gpus_per_replica=4, inference_throughput=1.0, speedup=1.15)
ALL_PLAIN = 8 * 6.76 + 4 * 1.0


def _plain(group: ClassGroup) -> ClassGroup:
    return ClassGroup(group.name, group.replicas, group.gpus_per_replica, group.inference_throughput)


@pytest.mark.parametrize(("s", "tide"), [(1.15, 1.071), (1.30, 1.210)])
def test_tides_fixed_split_and_ours_in_steady_state(s: float, tide: float) -> None:
    """TIDE §V-F: 8xH100 speculating while 4xMI250 train, over both serving plainly; ours lends the MI250s."""
    h100, mi250 = (ClassGroup(g.name, g.replicas, g.gpus_per_replica, g.inference_throughput, s) for g in (H100, MI250))
    assert fleet_rate((h100,), Routing.WEIGHTED) / ALL_PLAIN == pytest.approx(tide, abs=0.0005)
    ours = decide_fleet(FleetInput((h100,), mi250, True, Routing.WEIGHTED, False, None))
    assert ours.lend
    assert ours.reason is LendReason.LENT
    assert ours.rate / ALL_PLAIN == pytest.approx(s)
    assert ours.roles == {"H100": Role.SPECULATE, "MI250": Role.SPECULATE}


def test_a_plain_service_serves_pods_times_the_slowest_pod() -> None:
    plain = (_plain(H100), _plain(MI250))
    assert fleet_rate(plain, Routing.WEIGHTED) == pytest.approx(ALL_PLAIN)
    assert fleet_rate(plain, Routing.EVEN) == pytest.approx(3 * 4.0)  # 3 pods at the MI250 pod's rate
    assert fleet_rate((), Routing.EVEN) == 0.0


@pytest.mark.parametrize(("job_running", "due", "lent", "routing", "reason"), [
    (True, None, True, Routing.WEIGHTED, LendReason.JOB_RUNNING),
    (False, 30.0, True, Routing.WEIGHTED, LendReason.JOB_DUE),  # within the drain bound: drain now
    (False, 200.0, True, Routing.WEIGHTED, LendReason.LENT),  # lent already: serve until the drain is due
    (False, 200.0, False, Routing.WEIGHTED, LendReason.JOB_SOON),  # a start would not pay before the drain
    (False, 1000.0, False, Routing.WEIGHTED, LendReason.LENT),
    (False, None, False, Routing.EVEN, LendReason.DOES_NOT_PAY),  # 3 x 4 < 2 x 27: the slow pod drags
])
def test_when_the_training_class_is_lent(job_running, due, lent, routing, reason) -> None:
    decision = decide_fleet(FleetInput((H100,), MI250, True, routing, job_running, due,
                                       LendTiming(startup_s=240, drain_s=60), lent))
    assert decision.reason is reason
    assert decision.lend == (reason is LendReason.LENT)
    assert decision.roles["MI250"] is (Role.SPECULATE if decision.lend else Role.TRAIN)
    assert "MI250" in decision.message


def test_lending_off_or_no_training_class_keeps_the_split() -> None:
    off = decide_fleet(FleetInput((H100,), MI250, False, Routing.WEIGHTED, False, None))
    assert (off.lend, off.reason, off.roles["MI250"]) == (False, LendReason.NOT_ENABLED, Role.TRAIN)
    assert "lendWhenIdle" in off.message
    alone = decide_fleet(FleetInput((H100,), None, True, Routing.WEIGHTED, False, None))
    assert not alone.lend
    assert alone.reason is LendReason.NOTHING_TO_LEND
    assert set(alone.roles) == {"H100"}


def test_even_routing_lends_replicas_at_least_as_fast_as_the_slowest() -> None:
    """TP sized so that replicas match (an MI300X replica of 4 GPUs serves 17.7, an H100 one of 2, 13.5): a
    plain Service gives each the same requests, and the fleet serves 3 replicas at the slowest one's rate."""
    h100 = ClassGroup("H100", 2, 2, 6.76, 1.2)
    mi300x = ClassGroup("MI300X", 1, 4, 4.42, 1.2)
    decision = decide_fleet(FleetInput((h100,), mi300x, True, Routing.EVEN, False, None))
    assert decision.lend
    assert decision.rate == pytest.approx(3 * h100.replica_rate)


def test_speculation_role_follows_each_classs_speedup() -> None:
    slow = ClassGroup("MI250", 1, 4, 1.0, 1.0)  # speculation does not pay on its cost profile
    decision = decide_fleet(FleetInput((H100,), slow, True, Routing.WEIGHTED, False, None))
    assert decision.roles == {"H100": Role.SPECULATE, "MI250": Role.PLAIN}
