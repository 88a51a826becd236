"""The serving fleet as vLLM runs it, for driving decide() through scenarios (no Prometheus, no noise).

The pods keep the last SetSpeculation: off, the launch table (K everywhere), or the policy's
tokens-per-batch-size table applied at the true batch size each step (effects.py, the plugin's
scheduler). Prometheus' rate window shows an acceptance only while some step of the window drafted.
"""

from __future__ import annotations

from dataclasses import dataclass

from tide_operator.control import actions as act
from tide_operator.control.cost_model import tokens_for_batch_size
from tide_operator.control.policy import Observation, PolicyParams, PolicyState, decide


@dataclass
class ServedEngine:
    speculative_tokens: int = 3  # the launch numSpeculativeTokens
    enabled: bool = True  # pods launch speculating with the launch table
    table: act.Bands | None = None
    drafted_at: float | None = None  # the last pass whose interval drafted

    def g_at(self, batch_size: float) -> int:
        if not self.enabled:
            return 0
        return self.speculative_tokens if self.table is None else tokens_for_batch_size(self.table, batch_size)

    def observe(self, acceptance: float, batch_size: float, now: float, window_s: float) -> Observation:
        """What Prometheus shows at ``now`` after the last interval served at ``batch_size``."""
        if self.g_at(batch_size) > 0:
            self.drafted_at = now
        measured = self.drafted_at is not None and now - self.drafted_at < window_s
        return Observation(per_position_acceptance=(acceptance,) if measured else (), batch_size=batch_size,
                           acceptance_samples=5000 if measured else 0, promoted_version="v1")

    def apply(self, actions: list[act.Action]) -> None:
        for action in actions:
            if isinstance(action, act.SetSpeculation):
                self.enabled, self.table = action.enabled, action.tokens_per_batch_size if action.enabled else None


@dataclass(frozen=True)
class Pass:
    now: float
    batch_size: float
    speculative_tokens: int  # g the pods drafted with during the interval before this pass
    actions: tuple[act.Action, ...]
    state: PolicyState


def run(traffic: list[tuple[float, float, float]], params: PolicyParams, step_s: float = 30.0,
        engine: ServedEngine | None = None) -> list[Pass]:
    """traffic: (seconds, true acceptance, batch size) segments, one pass every ``step_s``."""
    engine = engine or ServedEngine(params.num_speculative_tokens)
    state, passes, now = PolicyState(), [], 0.0
    for seconds, acceptance, batch in traffic:
        end = now + seconds
        while now < end:
            g = engine.g_at(batch)
            observation = engine.observe(acceptance, batch, now, params.observation_window_s)
            actions, state = decide(observation, state, params, now)
            engine.apply(actions)
            passes.append(Pass(now, batch, g, tuple(actions), state))
            now += step_s
    return passes
