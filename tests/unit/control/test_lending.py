"""Lent replicas on the training class (issue 17 item 3): into service once ready, out of service
before deletion, deleted when idle or when the drain bound runs out, training held until they are gone."""

from __future__ import annotations

from tide_operator.control.lending import DrainInput, LendState, LentPod, plan_lending

DRAIN_S = 60.0


def pod(name: str, ready: bool = True, in_service: bool = True, in_flight: int | None = 0,
        terminating: bool = False) -> LentPod:
    return LentPod(name, ready, in_service, in_flight, terminating)


def plan(lend: bool, pods: tuple[LentPod, ...], now: float = 1000.0, since: float | None = None, replicas: int = 2):
    return plan_lending(DrainInput(lend, replicas, pods, now, DRAIN_S, since))


def test_lending_puts_only_ready_pods_into_service() -> None:
    decided = plan(True, (pod("a", in_service=False), pod("b", ready=False, in_service=False), pod("c")))
    assert decided.state is LendState.LENT
    assert decided.replicas == 2
    assert decided.into_service == ("a",)  # b still loads its model; c already serves
    assert decided.out_of_service == ()
    assert decided.holds_training


def test_nothing_lent_nothing_held() -> None:
    assert plan(True, ()).holds_training is False  # the Deployment is being made; no GPU held yet
    idle = plan(False, ())
    assert (idle.state, idle.replicas, idle.holds_training) == (LendState.IDLE, 0, False)


def test_a_drain_takes_pods_out_of_service_before_it_deletes_them() -> None:
    first = plan(False, (pod("a", in_flight=0), pod("b", in_flight=3)))
    assert first.state is LendState.DRAINING
    assert first.out_of_service == ("a", "b")
    assert first.replicas == 2
    assert not first.drained
    assert first.draining_since == 1000.0
    assert first.holds_training


def test_pods_out_of_service_and_idle_are_deleted() -> None:
    busy = plan(False, (pod("a", in_service=False), pod("b", in_service=False, in_flight=1)), now=1010, since=1000)
    assert not busy.drained
    assert busy.replicas == 2
    assert "1 request(s) in flight" in busy.message
    done = plan(False, (pod("a", in_service=False), pod("b", in_service=False)), now=1020, since=1000)
    assert done.drained
    assert done.replicas == 0
    assert done.out_of_service == ()
    assert done.holds_training


def test_the_bound_ends_a_drain_that_does_not_finish() -> None:
    stuck = (pod("a", in_service=False, in_flight=2), pod("b", in_service=False, in_flight=None))
    assert not plan(False, stuck, now=1059, since=1000).drained
    bounded = plan(False, stuck, now=1060, since=1000)
    assert bounded.drained
    assert bounded.replicas == 0
    assert "bound of 60s reached with 2 request(s)" in bounded.message


def test_an_unreadable_pod_waits_for_the_bound() -> None:
    assert not plan(False, (pod("a", in_service=False, in_flight=None),), now=1030, since=1000).drained


def test_a_pod_that_never_served_holds_nothing() -> None:
    assert plan(False, (pod("a", ready=False, in_service=False, in_flight=None),), now=1001, since=1000).drained


def test_training_waits_for_terminating_pods() -> None:
    going = plan(False, (pod("a", in_service=False, terminating=True),), now=1030, since=1000)
    assert (going.state, going.replicas, going.holds_training) == (LendState.DRAINING, 0, True)
    gone = plan(False, (), now=1040, since=1000)
    assert (gone.state, gone.holds_training, gone.draining_since) == (LendState.IDLE, False, None)


def test_lending_again_mid_drain_puts_the_pods_back() -> None:
    back = plan(True, (pod("a", in_service=False), pod("b", in_service=False, in_flight=2)), now=1010, since=1000)
    assert back.state is LendState.LENT
    assert back.into_service == ("a", "b")
    assert back.draining_since is None
