"""Every spec the CRD accepts is Invalid with a field named, or runs a full pass without raising.

Specs come from the CRD's own schema (tests/unit/api/spec_strategies.py); the API server's verdict
(OpenAPI, defaulting, then every CEL rule through cel-python: crd_harness) keeps only the accepted
ones. Each accepted spec goes through parse_spec, the reconcile pass against a fake cluster (an
operator configuration that lends whatever bucket and endpoint the spec names, GPU nodes of every
catalog class, any ConfigMap it references holding a valid cost profile), the S3 client the
control pass builds, and a scripted run of control passes through the whole lifecycle: collect,
train, canary, promote, a Prometheus outage and a second drift. 500 seeded examples per run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.unit.api.crd_harness import api_server_verdict
from tests.unit.api.spec_strategies import specs
from tide_operator.adapters.cluster import Applied
from tide_operator.adapters.cost_profile_source import read_cost_profile
from tide_operator.api import SpecError, TideDeploymentSpec, TideDeploymentStatus, parse_spec
from tide_operator.api.status import Phase as TidePhase
from tide_operator.config import OperatorConfig, PodPolicyConfig, PrometheusConfig, StorageConfig
from tide_operator.control import actions as act
from tide_operator.control.canary import PodGroupMetrics
from tide_operator.control.lifecycle import TrainingObservation, TrainingStatus
from tide_operator.control.placement import NodeInventory
from tide_operator.control.pod_policy import allowed_image_prefixes
from tide_operator.control.policy import Observation
from tide_operator.control.spec_params import policy_params
from tide_operator.control.storage_tenancy import with_storage_defaults
from tide_operator.passes.control_loop import SensorReading, control_pass
from tide_operator.passes.control_step import make_registry
from tide_operator.passes.serving_status import StatusDraft
from tide_operator.reconcile import reconcile

EXAMPLES = 500
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
PROFILE_JSON = json.dumps({"points": [{"batchSize": 1, "draftCostPermille": 200, "verifyCostPercent": 101},
                                      {"batchSize": 64, "draftCostPermille": 100, "verifyCostPercent": 150}]})
SEEN: dict[str, int] = {}
STORY_PASSES, STORY_OUTAGE, STORY_SHIFT = 6, 3, 4  # launch, canary, promote, outage, shift, after
CLIENTS_BUILT: set[tuple[str | None, str | None]] = set()
# Catalog keys mostly (the schema's pattern alone almost never names one), and one unknown class.
GPU_CLASSES = st.sampled_from([*OperatorConfig().catalog.names(), "B200"])
OVERRIDES = {f"spec.{pool}.gpuClasses[]": GPU_CLASSES for pool in ("inference", "training")}
# A long half-life that is mostly longer than any short one, so the drift block passes its CEL rule
# and its other knobs get tried.
OVERRIDES["spec.control.drift.longHalfLife"] = st.sampled_from(["30m", "1h", "99999h", "2m"])
# Pairs tied by a CEL rule: their bounds and defaults, so the rule holds about two times in three.
OVERRIDES["spec.control.training.sampleThreshold"] = st.sampled_from([1, 2048, 100_000_000])
OVERRIDES["spec.control.capture.maxBufferSamples"] = st.sampled_from([1, 4096, 100_000_000])
OVERRIDES["spec.control.interval"] = st.sampled_from(["4s", "5s", "30s", "99999h"])
OVERRIDES["spec.target.tensorParallelSize"] = st.sampled_from([1, 2, 64])


@dataclass
class FakeCluster:
    """Everything exists: Secrets, GPU nodes of every class, ConfigMaps holding a cost profile."""

    config: OperatorConfig
    replicas: int
    applied: list[dict[str, Any]] = field(default_factory=list)

    def secret_exists(self, namespace: str, name: str) -> bool:
        return True

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret", "token": "t"}

    def node_inventory(self, exclude: Any = None) -> list[NodeInventory]:
        return [NodeInventory(f"{gpu.name.lower()}-{i}", {gpu.node_labels[0].key: gpu.node_labels[0].values[0]},
                              {gpu.resource_name: 16})
                for gpu in self.config.catalog.gpu_classes for i in range(64)]

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "ConfigMap" and not name.startswith("chat-"):  # a referenced cost profile, by any key
            return {"metadata": {"name": name}, "data": _AnyKey(PROFILE_JSON)}
        return None

    def apply(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        self.applied.append(desired)
        return Applied(desired["kind"], desired["metadata"]["name"], "created")

    def create_owned(self, desired: dict[str, Any], live: dict[str, Any] | None = None) -> Applied:
        self.applied.append(desired)  # the bootstrap init Job of a spec without draft.initial
        return Applied(desired["kind"], desired["metadata"]["name"], "created")

    def deployment(self, namespace: str, name: str) -> dict[str, Any]:
        return {"status": {"readyReplicas": self.replicas}}

    def disruption_budget_api_version(self) -> str:
        return "policy/v1"


class _AnyKey(dict[str, str]):
    def __init__(self, value: str) -> None:
        super().__init__()
        self.value = value

    def get(self, key: str, default: Any = None) -> str:  # type: ignore[override]
        return self.value

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return self.value


class RecordingEffects:
    def __init__(self) -> None:
        self.done: list[act.Action] = []

    def _do(self, action: act.Action) -> None:
        self.done.append(action)

    set_speculation = set_capture = launch_training = cancel_training = _do
    start_canary = promote = roll_back = serve_draft = invalidate = _do

    def converge(self, speculation: bool, capture: bool, bands: object = None, canary: object = None,
                 acceptance: object = None) -> list[str]:
        return []

    def converge_drafts(self, canary: object) -> list[str]:
        return []

    def last_run(self) -> str | None:
        runs = [a.run_id for a in self.done if isinstance(a, act.LaunchTraining)]
        return runs[-1] if runs else None


def lending_config(raw: dict[str, Any]) -> OperatorConfig:
    """An operator configuration that admits the bucket, endpoint, images, priority classes and
    Prometheus URL this spec names (an admin's allowlists are not what this test is about)."""
    s3 = raw["storage"]["s3"]
    endpoint = s3.get("endpoint")
    storage = StorageConfig(buckets=(s3["bucket"],), endpoint=endpoint,
                            allowed_endpoints=(endpoint,) if endpoint else ())
    pools = [raw.get("inference", {}), raw.get("training", {})]
    defaults = OperatorConfig()
    pod_policy = PodPolicyConfig(
        allowed_image_prefixes=(*allowed_image_prefixes(defaults), *(p["image"] for p in pools if "image" in p)),
        allowed_priority_class_names=tuple(p["priorityClassName"] for p in pools if "priorityClassName" in p))
    url = raw.get("prometheus", {}).get("url")
    try:
        prometheus = PrometheusConfig(allowed_urls=(url,) if url else ())
    except ValidationError:  # no admin can allowlist it: the pass must refuse it by itself
        prometheus = PrometheusConfig()
    return OperatorConfig(storage=storage, pod_policy=pod_policy, prometheus=prometheus)


def body(raw: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "chat", "namespace": "ns", "uid": "uid-1", "generation": 1}, "spec": raw}


def observation(spec: TideDeploymentSpec, step: int, run_id: str | None) -> Observation | None:
    """Pass ``step`` of a scripted story: a full buffer, a better candidate, a canary, an outage, a shift."""
    if step == STORY_OUTAGE:
        return None  # Prometheus down for a pass
    rate = 0.75 if step < STORY_SHIFT else 0.2  # traffic shifts late in the story
    length = 1 + rate + rate**2 + rate**3
    training = (TrainingObservation(run_id, TrainingStatus.SUCCEEDED, candidate_acceptance_length=3.2,
                                    served_acceptance_length=length) if run_id else None)
    group = PodGroupMetrics(acceptance_length=length, generation_throughput=100.0)
    # The canary wins for an odd-length revision and loses for an even one: promotion and rollback both run.
    gain = 1.3 if len(spec.target.revision) % 2 else 0.5
    canary = PodGroupMetrics(acceptance_length=length * gain, generation_throughput=100.0)
    return Observation(acceptance_rate=rate, acceptance_length=length, per_position_acceptance=(rate, rate**2),
                       batch_size=float(2**step), generation_throughput=100.0, acceptance_samples=10**6,
                       buffer_samples=spec.control.capture.max_buffer_samples, promoted_version="v1",
                       training=training, canary=canary, control=group)


def run_control_story(spec: TideDeploymentSpec, config: OperatorConfig, cluster: FakeCluster) -> None:
    s3 = spec.storage.s3
    if (s3.endpoint, s3.region) not in CLIENTS_BUILT:  # only these two reach botocore's checks; 0.1 s each
        make_registry("chat", "ns", spec, cluster)  # type: ignore[arg-type]  # the S3 client of every pass
        CLIENTS_BUILT.add((s3.endpoint, s3.region))
    points = read_cost_profile(spec, "ns", cluster)  # as reconcile read it (it answered Invalid if it could not)
    params = policy_params(spec, points, observation_window_s=config.prometheus_window_seconds)
    draft = StatusDraft(TideDeploymentStatus(phase=TidePhase.SERVING), generation=1, now=NOW)
    effects, now = RecordingEffects(), 0.0
    step_s = max(params.canary.analysis_window_s, params.canary.min_promotion_interval_s, 1.0)
    for step in range(STORY_PASSES):
        reading = SensorReading(observation(spec, step, effects.last_run()), "prometheus: connection refused")
        control_pass(draft, params, reading, effects, now)
        now += step_s


def outcome(raw: dict[str, Any]) -> str:
    """'invalid' (a field is named), or 'ran' (reconcile and the control story finished)."""
    config = lending_config(raw)
    try:
        spec = parse_spec(raw, config.catalog.names())
    except SpecError as e:
        refused = e
    else:
        refused = None
    if refused is not None:
        assert refused.field.startswith("spec"), refused
        return "invalid"
    cluster = FakeCluster(config, spec.inference.replicas)
    result = reconcile(body(raw), cluster, config, adopt=lambda child: child, now=NOW)  # type: ignore[arg-type]
    if result.status.get("phase") == TidePhase.INVALID:
        ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
        assert ready["message"].startswith("spec."), ready
        return "invalid"
    run_control_story(with_storage_defaults(spec, config.storage), config, cluster)
    return "ran"


# No shrink phase: an example costs ~0.1 s and shrinking one failure ran past the 300 s test timeout;
# the failing spec is printed unshrunk and the seed is fixed (derandomize), so it reproduces.
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(specs(OVERRIDES))
def check_spec(raw: dict[str, Any]) -> None:
    assume(not api_server_verdict(raw))
    kind = outcome(raw)
    SEEN[kind] = SEEN.get(kind, 0) + 1


def test_every_spec_the_crd_accepts_is_invalid_with_a_field_or_runs_a_full_pass() -> None:
    SEEN.clear()
    started = time.monotonic()
    check_spec()
    seconds = time.monotonic() - started
    accepted = sum(SEEN.values())
    print(f"\n{accepted} accepted specs ({SEEN}) in {seconds:.1f}s")
    assert SEEN.get("ran", 0) >= EXAMPLES // 4  # the story runs often, not only Invalid verdicts
