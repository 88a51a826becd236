"""The references, modelled as fairly as ours (same world, same trainer, same paired noise).

- no-spec: speculation off. - static: the launch draft at g=3, never retrained, never captures.
- TIDE-default / TIDE-adaptive (tide-paper.md §6-7): Algorithm 1 in the engine: EMAs of the acceptance
  each step (the operator's drift parameters: TIDE gives none), capture from the start and at a shift,
  a run every sampleThreshold samples, deploy to every pod when the evaluation beats the served draft,
  else stop capture until the next shift. TIDE-adaptive switches in the engine at the TRUE batch size
  each step: on while the engine's measured E[l] > c(b) g + beta(b) (the profiled model, which is 5%
  optimistic here as for ours); while off it measures nothing and keeps its last E[l]; a deployed
  draft starts from its evaluated length.
- informed oracle: the true current acceptance and batch (not the future): the best g each step;
  captures always; a run whenever the buffer since the last launch reaches the threshold; promotes a
  finished candidate the moment it ends when it is truly better on the current traffic.
"""

from __future__ import annotations

from bench.policy_sim.generator import STEP_S
from bench.policy_sim.world import SAMPLE_THRESHOLD, Deployment, Draft, G, World, best_g
from tide_operator.control.cost_model import DEFAULT_PROFILE, expected_acceptance_length
from tide_operator.control.drift import DriftParams, DriftState, shift_detected, update_drift


class NoSpec:
    def __init__(self, world: World) -> None:
        self.dep = Deployment.launched(world.launch, enabled=False)

    def tick(self, t: float) -> None:
        return None

    def before_step(self, i: int) -> None:
        return None


class Static(NoSpec):
    def __init__(self, world: World) -> None:
        self.dep = Deployment.launched(world.launch)


class Tide:
    def __init__(self, world: World, adaptive: bool) -> None:
        self.world, self.adaptive = world, adaptive
        self.dep = Deployment.launched(world.launch)
        self.dep.capture = True  # Algorithm 1: collection starts enabled
        self.drift, self.drift_params, self.active = DriftState(), DriftParams(), False
        self.length: float | None = None  # the engine's recent measured E[l]
        self.runs = 0

    def before_step(self, i: int) -> None:
        """In the engine: measure, detect a shift, and (adaptive) switch at this step's true batch."""
        w, b, t = self.world, self.world.batches[i], float(self.world.times[i])
        pod = self.dep.pods[0]
        if pod.enabled:
            a = self.dep.pointer.acceptance(w.weights[i]) * (1 + w.noise.engine[i])
            a = min(max(a, 0.0), 1.0)
            measured = expected_acceptance_length(a, G)
            self.length = measured if self.length is None else 0.8 * self.length + 0.2 * measured
            self.drift = update_drift(self.drift, a, int(10 * b * STEP_S * G), t, self.drift_params)
            shift = shift_detected(self.drift, self.drift_params, active=self.active)
            if shift and not self.active:
                self.dep.capture = True
            self.active = shift
        if self.adaptive and self.length is not None:
            on = self.length > DEFAULT_PROFILE.draft_cost(b) * G + DEFAULT_PROFILE.verify_cost(b, G)
            for p in self.dep.pods:
                p.enabled = on

    def tick(self, t: float) -> None:
        dep = self.dep
        for run_id in [r for r in dep.finished if r.startswith("tide")]:
            self._deploy_if_better(dep.finished.pop(run_id))
        if dep.capture and dep.job is None and dep.samples_since_launch >= SAMPLE_THRESHOLD:
            self.runs += 1
            self.world.launch_training(dep, f"tide-r{self.runs}", t)

    def _deploy_if_better(self, job) -> None:
        if job.eval_length > job.baseline_length:
            self.dep.pointer = Draft(f"v-{job.run_id}", job.candidate.live)
            for p in self.dep.pods:
                p.draft = self.dep.pointer
            self.length, self.drift, self.active = job.eval_length, DriftState(), False
        else:
            self.dep.capture = False


class Oracle:
    def __init__(self, world: World) -> None:
        self.world = world
        self.dep = Deployment.launched(world.launch)
        self.dep.capture = True
        self.runs = 0

    def before_step(self, i: int) -> None:
        w, dep = self.world, self.dep
        if dep.job is None and dep.finished:
            job = dep.finished.pop(next(iter(dep.finished)))
            if job.candidate.acceptance(w.weights[i]) > dep.pointer.acceptance(w.weights[i]):
                dep.pointer = Draft(f"v-{job.run_id}", job.candidate.live)
                for p in dep.pods:
                    p.draft = dep.pointer
        g = best_g(dep.pointer.acceptance(w.weights[i]), w.batches[i], w.params.cost_error)
        for p in dep.pods:
            p.enabled, p.engine_g = g > 0, g

    def tick(self, t: float) -> None:
        if self.dep.job is None and not self.dep.finished and self.dep.samples_since_launch >= SAMPLE_THRESHOLD:
            self.runs += 1
            self.world.launch_training(self.dep, f"oracle-r{self.runs}", t)
