"""The whole-loop test judges the shift's own training run, not a next round launched just before it."""

from __future__ import annotations

from tide_e2e.whole_loop import Transition, shift_run


def _training(at: float, since_shift: float) -> Transition:
    return Transition(at, "Training", "SampleThresholdReached",
                      f"buffer 240 >= 240 new samples: training abcd1234-r3 on the captures since the shift "
                      f"{since_shift:.0f}s ago")


def test_a_next_round_on_captures_from_before_the_switch_is_not_the_shifts_run() -> None:
    transitions = [
        Transition(380.0, "Collecting", "Collecting", "promoted; collecting for the next round"),
        _training(444.4, 300.0),  # a next round on the home round's captures: its shift is at 144 s
        Transition(449.9, "Collecting", "WorkloadShift", "workload shift in Training: older samples are stale"),
        _training(560.0, 110.0),  # the shift's run: captures since 450 s
    ]
    run = shift_run(transitions, shift_at=439.4)
    assert run is not None
    assert (run.at_s, run.captured_since) == (560.0, 450.0)


def test_no_run_on_captures_after_the_switch_is_none() -> None:
    assert shift_run([_training(444.4, 300.0), Transition(450.0, "Training", "TrainingRunning", "waiting")],
                     shift_at=439.4) is None
