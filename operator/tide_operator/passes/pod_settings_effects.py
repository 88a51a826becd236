"""The pods' runtime settings among the control pass's effects: speculation (the fleet's switch, each
serving group's own table, a roll where pods switch only by a restart) and capture, and the
convergence of pods that missed a switch. ClusterEffects (effects.py) carries out the rest.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes.client.rest import ApiException

from tide_contracts.registry import DraftRegistry
from tide_contracts.serving_control import ServingStatus
from tide_operator.adapters.cluster import Cluster
from tide_operator.adapters.fleet import Fleet, RestartRequired, ServingPod
from tide_operator.api import TideDeploymentSpec
from tide_operator.api.conditions import Reason
from tide_operator.config import OperatorConfig
from tide_operator.control import actions as act
from tide_operator.control.cost_model import CostProfile
from tide_operator.control.placement import Placement
from tide_operator.control.serving_groups import ClassTables
from tide_operator.control.speculation import DecisionParams
from tide_operator.manifests.ownership import ChildConflict
from tide_operator.manifests.pod import s3_uri
from tide_operator.manifests.serving import OFF_BANDS, build_serving_configmap, full_bands, launch_bands_of
from tide_operator.manifests.serving_fleet import serving_deployments
from tide_operator.manifests.trainer import bootstrap_location
from tide_operator.passes.control_loop import EffectError
from tide_operator.passes.pod_convergence import CanarySpeculation, DesiredPods, corrections
from tide_operator.passes.serving_groups import launched_deployment

# What pods report for the launch draft ("initial") or a promoted one (a registry version vN).
_LAUNCH_OR_PROMOTED = re.compile(r"^(initial|v[1-9][0-9]*)$")


@dataclass
class PodSettingEffects:
    name: str
    namespace: str
    spec: TideDeploymentSpec
    placement: Placement
    config: OperatorConfig
    cluster: Cluster
    fleet: Fleet
    registry: DraftRegistry
    adopt: Any
    class_profiles: Mapping[str, CostProfile] = field(default_factory=dict)  # serving groups' own (by class)

    def set_speculation(self, action: act.SetSpeculation) -> str | None:
        """Live through the plugin; pods that can switch only by a restart are rolled (returns why)."""
        # The policy's table (adaptiveSpeculativeTokens) replaces the engine's per-batch-size table live;
        # a serving group with its own cost profile gets its own table (serving_groups.ClassTables).
        try:
            for bands, pods in self._by_table(action.tokens_per_batch_size, action.acceptance):
                self.fleet.set_speculation(action.enabled, self._on_bands(bands), pods)
        except RestartRequired as refused:
            return self._roll_speculation(action, refused)
        return None

    def _by_table(self, fleet_bands: act.Bands | None,
                  acceptance: float | None) -> list[tuple[act.Bands | None, list[ServingPod] | None]]:
        decision = self.spec.control.decision
        off = DecisionParams(decision.speedup_margin_percent, decision.hysteresis_percent).off_threshold
        tables = ClassTables(self.class_profiles, self.spec.draft.num_speculative_tokens, off)
        return tables.by_table(self.fleet.pods, fleet_bands, acceptance)

    def _roll_speculation(self, action: act.SetSpeculation, refused: RestartRequired) -> str | None:
        bands = self._on_bands(action.tokens_per_batch_size) if action.enabled else OFF_BANDS
        live = launched_deployment(self.name, self.placement,
                                   lambda dep: self.cluster.deployment(self.namespace, dep))
        if launch_bands_of(live) == bands:
            return None  # already rolled this way: the refusals come from pods still being replaced
        try:
            for child in (build_serving_configmap(self.name, self.namespace, self.spec, self._bootstrap(),
                                                  launch_bands=bands),
                          *serving_deployments(self.name, self.namespace, self.spec, self.placement, self.config,
                                               bootstrap_draft=self._bootstrap(), launch_bands=bands)):
                self.cluster.apply(self.adopt(child))
        except ChildConflict as e:
            raise EffectError(f"rolling the serving pods for speculation: {e}", Reason.CHILD_CONFLICT) from e
        except (ValueError, ApiException) as e:
            raise EffectError(f"rolling the serving pods for speculation: {e}", Reason.KUBERNETES_API_ERROR) from e
        how = "off (K=0 at every batch size)" if not action.enabled else (
            f"on with {len(bands)} batch-size band(s)" if bands else "on")
        return (f"the pods switch speculation only by a restart ({str(refused)[:300]}): rolling them with "
                f"speculation {how}")

    def set_capture(self, action: act.SetCapture) -> None:
        desired = self._desired(speculation=False, capture=action.enabled)
        self.fleet.set_capture(action.enabled, desired.sampling_rate, desired.destination)

    def converge(self, speculation: bool, capture: bool, bands: act.Bands | None = None,
                 canary: CanarySpeculation | None = None, acceptance: float | None = None) -> list[str]:
        """Repeat the switches a pod missed (it started after them, or a fleet-wide switch reached a canary pod
        that speculates on its own); returns what was corrected. ``acceptance``: what ``bands`` were made for."""
        desired = replace(self._desired(speculation, capture), bands=self._on_bands(bands) if speculation else None)
        statuses = self.fleet.statuses(ready_only=True)
        own = self._canary_speculation(statuses, desired, canary) if not speculation else {}
        if speculation:  # a serving group with its own cost profile converges on its own table
            own |= {p.name: replace(desired, bands=self._on_bands(b)) for b, pods in self._by_table(bands, acceptance)
                    if b != bands for p in pods or ()}
        by_name = {p.name: p for p in self.fleet.pods}
        fixes = []
        for name, status in sorted(statuses.items()):
            wanted = own.get(name, desired)
            for fix in corrections({name: status}, wanted):
                if fix.speculation is not None:
                    self.fleet.set_speculation(fix.speculation, wanted.bands, [by_name[name]])
                if fix.capture is not None:
                    self.fleet.set_capture(fix.capture, desired.sampling_rate, desired.destination, [by_name[name]])
                fixes.append(fix)
        return [fix.describe() for fix in fixes]

    def _canary_speculation(self, statuses: Mapping[str, ServingStatus | None], desired: DesiredPods,
                            canary: CanarySpeculation | None) -> dict[str, DesiredPods]:
        """Canary pods that speculate while the fleet does not: a first draft's (K), or a canary's (its bands)."""
        first = replace(desired, speculation=True, bands=full_bands(self.spec.draft.num_speculative_tokens))
        own = dict.fromkeys(self._first_draft_canaries(statuses), first)
        if canary is not None:
            alone = replace(desired, speculation=True, bands=self._on_bands(canary.bands))
            own.update(dict.fromkeys((p for p in canary.pods if p in statuses), alone))
        return own

    def _desired(self, speculation: bool, capture: bool) -> DesiredPods:
        destination = s3_uri(self.name, self.namespace, self.spec.storage.s3, "captures") + "/"
        return DesiredPods(speculation, capture, self.spec.control.capture.sampling_percent / 100,
                           destination if capture else None)

    def _bootstrap(self) -> str | None:
        """The bootstrap head the pods launch with when the spec names no initial draft (control passes
        run only once it is launched: reconcile waits for it)."""
        return None if self.spec.draft.initial else bootstrap_location(self.name, self.namespace, self.spec)

    def _on_bands(self, bands: act.Bands | None) -> act.Bands | None:
        """Pods launched with the head at K=0 hear "on, launch table" as K=0: give them K explicitly."""
        if bands is None and self._bootstrap() is not None:
            return full_bands(self.spec.draft.num_speculative_tokens)
        return bands

    def _canary_speculates(self, pods: list[ServingPod], bands: act.Bands | None) -> None:
        """The canary pods draft with the candidate while the others do not (the throughput control): a first
        draft's (the others at K=0), or any canary while the fleet's switch is off. Rollback and promotion
        return them to the fleet's setting through convergence (control_loop._converge).

        Pods that switch only by a restart cannot: their canary measures nothing and ends Inconclusive.
        """
        with contextlib.suppress(RestartRequired):
            self.fleet.set_speculation(True, bands, pods)

    def _first_draft_canaries(self, statuses: Mapping[str, ServingStatus | None]) -> set[str]:
        """Without a promoted draft, pods serving a candidate (not the head, not a vN) are a first canary."""
        if self._bootstrap() is None:
            return set()
        return {pod for pod, status in statuses.items() if status is not None and status.draft is not None
                and not _LAUNCH_OR_PROMOTED.match(status.draft.version)}
