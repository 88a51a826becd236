"""Whether a training run pays now, while its GPUs could serve instead (issue 17, control/fleet.py).

TIDE trains whenever there are samples. Here the training class serves while no Job needs it, so a run
has a price: for its length T it holds GPUs that would serve C_t s (C_t the training class's rate,
catalog throughput x GPUs, s the served draft's modelled speedup at the batch size now). Its draft then
adds C_s (s* - s) (C_s the serving classes' rate, s* the speedup at the acceptance training is expected
to reach) for as long as the load stays where it is: R, unknown. A load regime ends when the batch size
leaves a factor-of-two band; R is estimated as the longer of how long the current one has held (a regime
that has lasted long is likely to last about as long again) and how long regimes have lasted here, and
is unbounded until one has ended (nothing says the load moves). So

    train  iff  C_s (s* - s) (R - T) > C_t s T          (TIDE: always)

A run waits through a burst (R small, and at a batch size where no draft pays s* is near s), through a
short excursion to another domain, and while the served draft is as good as training gets (s* = s); it
goes ahead on long, lightly loaded traffic with a draft well below what training reaches. A running run
is weighed on its remaining time (what it already cost is spent) and cancelled when the load turns
(lifecycle_training: TrainingPreempted; its samples stay for the next run).
Pure: the caller tracks the regime from its batch-size readings and knows the runs' usual length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tide_operator.control.cost_model import acceptance_rate_from_length

# What training can reach when this deployment has promoted nothing better: the per-token acceptance of a
# trained EAGLE-3 draft with acceptance length 2.5 at g = 3 on its own traffic (TIDE's gpt-oss-120b, the
# cost model's fit in cost_model.py).
TRAINED_ACCEPTANCE = acceptance_rate_from_length(2.5, 3)
LOAD_BAND = 2.0  # the batch size moved by more than this factor: a new load regime
REGIME_PRIOR_S = 1200.0  # R before any regime has ended: how long a load is assumed to hold
# Hysteresis of the verdict, as the speculation switch has its own: a run starts only when its gain clears
# the cost by this share, and a running one is cancelled only when its gain falls this share below it.
TRAINING_HYSTERESIS = 0.5
# T before this deployment's own runs are timed: a trainer Job and its evaluation and canary until the draft
# serves every pod (the policy benchmark's world: 480-900 s of training, about two minutes of canary).
RUN_PRIOR_S = 720.0


def reachable_acceptance(best_promoted: float | None) -> float:
    """The per-token acceptance a training run is expected to reach (s* is modelled at it)."""
    return max(TRAINED_ACCEPTANCE, best_promoted or 0.0)


@dataclass(frozen=True)
class LoadRegime:
    """Since when the batch size has stayed within a factor of LOAD_BAND of ``batch``, and how long the
    regimes before it lasted."""

    since: float
    batch: float
    typical_s: float | None = None  # regimes' length, a moving average of the ended ones (None: none ended)
    best_promoted: float | None = None  # the best per-token acceptance promoted so far (s* is at least this)

    def observe(self, batch: float | None, promoted: float | None, now: float) -> LoadRegime:
        best = max(self.best_promoted or 0.0, promoted or 0.0) or None
        if batch is not None and not self.batch / LOAD_BAND <= batch <= self.batch * LOAD_BAND:
            ended = now - self.since
            typical = ended if self.typical_s is None else (self.typical_s + ended) / 2
            return LoadRegime(now, batch, typical, best)
        return replace(self, best_promoted=best)

    def expected_rest(self, now: float, prior_s: float = REGIME_PRIOR_S) -> float:
        """R: as long again as the regime has held, or as long as regimes last here (``prior_s`` until one
        has ended)."""
        return max(now - self.since, prior_s if self.typical_s is None else self.typical_s)


@dataclass(frozen=True)
class TrainingValue:
    """A run's gain against its cost, at today's load, over the regime's expected rest."""

    serving_rate: float  # C_s: the serving groups without speculation
    lend_rate: float  # C_t: the training class's replicas without speculation
    speedup_now: float  # s: modelled at the served draft's acceptance and the batch size now
    speedup_trained: float  # s*: modelled at the reachable acceptance, same batch size
    remaining_s: float  # R: the regime's expected rest (LoadRegime.expected_rest)
    run_s: float  # T: a run's length to promotion (what is left of it for a running one)
    # What of T the training GPUs would not serve anyway: lent replicas start serving only this long after the
    # GPUs are free, so cancelling a run with less than that left frees nothing the fleet serves.
    idle_s: float = 0.0

    @property
    def gain(self) -> float:
        if self.speedup_trained <= self.speedup_now:
            return 0.0
        after_run = max(0.0, self.remaining_s - self.run_s)
        return self.serving_rate * (self.speedup_trained - self.speedup_now) * after_run

    @property
    def cost(self) -> float:
        return self.lend_rate * self.speedup_now * max(0.0, self.run_s - self.idle_s)

    def pays(self, running: bool) -> bool:
        """A run starts while its gain clears its cost by the hysteresis; a running one goes on until its gain
        falls that far below it."""
        return self.gain > self.cost * ((1 - TRAINING_HYSTERESIS) if running else (1 + TRAINING_HYSTERESIS))

    def message(self) -> str:
        return (f"training would not pay at this load: speedup {self.speedup_now:.3f} -> {self.speedup_trained:.3f} "
                f"over the {self.remaining_s:.0f}s the load is expected to hold, against {self.run_s:.0f}s of the "
                f"training GPUs serving")

def keep_training(value: TrainingValue, regime: LoadRegime, running_since: float | None) -> bool:
    """The verdict: a run (running since ``running_since``) is weighed again only once the load has left its
    regime since it started, so acceptance noise never cancels a run; one not started is weighed each pass."""
    if running_since is not None and regime.since <= running_since:
        return True
    return value.pays(running=running_since is not None)


@dataclass(frozen=True)
class VerdictInput:
    """One pass's reading for the verdict."""

    now: float
    batch: float | None  # requests running per engine (Prometheus): where the speedups are modelled
    acceptance: float | None  # the served draft's per-token acceptance, last known
    promoted: float | None  # the acceptance the last promotion reached (lifecycle.promoted_acceptance)
    serving_rate: float  # C_s: the serving groups without speculation (fleet_rate at s = 1)
    lend_rate: float  # C_t: the training class's replicas without speculation
    run_s: float = RUN_PRIOR_S  # T: a run's length to promotion
    running_since: float | None = None  # when the running Job was first seen (None: none runs)
    regime_prior_s: float = REGIME_PRIOR_S  # R before any regime has ended
    startup_s: float = 0.0  # how long lent replicas take to serve (a running run is weighed net of it)
    # What the regime tracks (default: batch): requests running over all engines where the pod count moves
    # (lent replicas added and drained would otherwise end a regime each time they halve the batch per engine).
    load: float | None = None


def training_verdict(regime: LoadRegime | None, inp: VerdictInput,
                     speedup: Callable[[float], float]) -> tuple[LoadRegime | None, str | None]:
    """The regime after this reading, and why training waits (None: train as the lifecycle decides).

    ``speedup``: the cost model's speedup at a per-token acceptance, at the batch size now (s and s*).
    Without a batch size or an acceptance the verdict holds nothing: training runs as TIDE's would.
    """
    load = inp.load if inp.load is not None else inp.batch
    if load is not None:
        regime = (regime or LoadRegime(inp.now, load)).observe(load, inp.promoted, inp.now)
    if inp.acceptance is None or inp.batch is None or regime is None:
        return regime, None
    run_s = inp.run_s if inp.running_since is None else max(0.0, inp.run_s - (inp.now - inp.running_since))
    value = TrainingValue(inp.serving_rate, inp.lend_rate, speedup(inp.acceptance),
                          speedup(max(reachable_acceptance(regime.best_promoted), inp.acceptance)),
                          regime.expected_rest(inp.now, inp.regime_prior_s), run_s,
                          inp.startup_s if inp.running_since is not None else 0.0)
    return regime, None if keep_training(value, regime, inp.running_since) else value.message()
