"""Pod calls run on a bounded pool, each with a deadline: one hung pod costs a pass its deadline, not
the sum of every pod's timeout; answers and failures come back in pod-name order."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from test_draft_convergence import status

from tide_contracts.serving_control import ErrorCode, ServingControlError, ServingStatus
from tide_operator.adapters.fleet import Fleet, ServingPod
from tide_operator.api.conditions import Reason
from tide_operator.config import PodCallsConfig
from tide_operator.passes.control_loop import EffectError

HANG_S = 5.0  # how long a hung fake pod holds its call (a real one: until the socket timeout)


class Pod:
    """A fake pod's control routes: answers after ``delay_s``, or hangs until released."""

    def __init__(self, delay_s: float = 0.0, hang: threading.Event | None = None) -> None:
        self.delay_s, self.hang = delay_s, hang
        self.calls: list[str] = []
        self.active, self.most_active = 0, 0
        self.lock = threading.Lock()

    def _answer(self, what: str) -> None:
        self.calls.append(what)
        if self.hang is not None:
            self.hang.wait(HANG_S)
        time.sleep(self.delay_s)

    def status(self) -> ServingStatus:
        self._answer("status")
        return status("v3")

    def set_capture(self, request: Any) -> None:
        self._answer("capture")


def fleet(pods: dict[str, Pod], calls: PodCallsConfig, seen: list[float] | None = None,
          order: list[str] | None = None) -> Fleet:
    """``seen`` collects the timeout each client was made with."""
    ips = {name: f"10.0.0.{i}" for i, name in enumerate(sorted(pods), 1)}
    by_url = {f"http://{ips[n]}:8081": pod for n, pod in pods.items()}

    def client(url: str, token: str, timeout_s: float) -> Pod:
        if seen is not None:
            seen.append(timeout_s)
        return by_url[url]

    return Fleet([ServingPod(n, ips[n], True) for n in order or sorted(pods)], 8081, "t", client_factory=client,
                 calls=calls)


@pytest.fixture
def hang() -> Any:
    released = threading.Event()
    yield released
    released.set()  # the abandoned call ends with the test


def test_one_hung_pod_costs_the_pass_its_deadline_not_the_sum_of_timeouts(hang: threading.Event) -> None:
    pods = {f"chat-{c}": Pod(delay_s=0.2) for c in "abdefghi"} | {"chat-c": Pod(hang=hang)}
    started = time.monotonic()
    answers = fleet(pods, PodCallsConfig(parallelism=8, status_deadline_seconds=0.5)).statuses()
    elapsed = time.monotonic() - started
    # One after another: 8 x 0.2 s plus the hung pod's HANG_S; in parallel: about the deadline.
    assert elapsed < 1.5, elapsed
    assert list(answers) == sorted(pods)
    assert answers["chat-c"] is None
    assert all(answers[name] is not None for name in pods if name != "chat-c")


def test_a_hung_pod_fails_the_effect_by_name_and_the_others_are_told(hang: threading.Event) -> None:
    pods = {"chat-a": Pod(), "chat-b": Pod(hang=hang), "chat-c": Pod()}
    with pytest.raises(EffectError) as failed:
        fleet(pods, PodCallsConfig(switch_deadline_seconds=0.3)).set_capture(True, 0.1, None)
    assert str(failed.value) == "capture on failed on 1 pod(s): chat-b: no answer within 0.3 s"
    assert failed.value.reason == Reason.SERVING_PODS_UNREACHABLE
    assert pods["chat-a"].calls == pods["chat-c"].calls == ["capture"]


class Refusing(Pod):
    def set_capture(self, request: Any) -> None:
        raise ServingControlError(503, ErrorCode.ENGINE_ERROR, "engine busy")


def test_failures_are_named_in_pod_name_order_whatever_the_listing_order() -> None:
    pods: dict[str, Pod] = {"chat-b": Refusing(), "chat-a": Refusing(), "chat-c": Pod()}
    with pytest.raises(EffectError) as failed:
        fleet(pods, PodCallsConfig(), order=["chat-c", "chat-b", "chat-a"]).set_capture(False, None, None)
    assert str(failed.value) == ("capture off failed on 2 pod(s): chat-a: 503 engine_error: engine busy; "
                                 "chat-b: 503 engine_error: engine busy")


class Counting(Pod):
    """Shares one counter across pods: how many calls run at once."""

    def __init__(self, shared: dict[str, int], lock: threading.Lock) -> None:
        super().__init__()
        self.shared, self.shared_lock = shared, lock

    def status(self) -> ServingStatus:
        with self.shared_lock:
            self.shared["now"] += 1
            self.shared["most"] = max(self.shared["most"], self.shared["now"])
        time.sleep(0.05)
        with self.shared_lock:
            self.shared["now"] -= 1
        return status("v3")


def test_the_pool_is_bounded_by_the_configured_parallelism() -> None:
    shared, lock = {"now": 0, "most": 0}, threading.Lock()
    pods: dict[str, Pod] = {f"chat-{i:02}": Counting(shared, lock) for i in range(12)}
    answers = fleet(pods, PodCallsConfig(parallelism=3)).statuses()
    assert all(answers.values())
    assert shared["most"] == 3


def test_each_call_gets_its_deadline_as_the_clients_timeout() -> None:
    seen: list[float] = []
    calls = PodCallsConfig(status_deadline_seconds=4, switch_deadline_seconds=9, draft_load_deadline_seconds=90)
    pods = {"chat-a": Pod()}
    target = fleet(pods, calls, seen)
    target.statuses()
    target.set_capture(True, None, None)
    assert seen == [4, 9]
    # The defaults: status 5 s, a runtime switch 15 s, a draft load (download, verify, swap) 120 s.
    assert (PodCallsConfig().status_deadline_seconds, PodCallsConfig().switch_deadline_seconds,
            PodCallsConfig().draft_load_deadline_seconds, PodCallsConfig().parallelism) == (5, 15, 120, 8)
