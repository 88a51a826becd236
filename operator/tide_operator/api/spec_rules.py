"""Cross-field rules of the spec: the Python twins of the CRD's CEL rules, plus catalog checks.

Each rule returns (field path, message) problems; ``parse_spec`` reports them in this order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from tide_operator.api.extra_args import denied_flag
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.api.spec_control import CostProfileSpec, ServerSideEncryption
from tide_operator.api.spec_workload import SUPPORTED_DRAFT_METHODS
from tide_operator.api.units import duration_seconds

Problem = tuple[str, str]
MIN_INTERVAL_SECONDS = 5
MIN_TRAINING_TIMEOUT_SECONDS = 10
# A probe speculates for one rate window (60 s by default): a shorter interval would keep speculation
# on most of the time; a day is long enough for any traffic to come back.
MIN_PROBE_INTERVAL_SECONDS, MAX_PROBE_INTERVAL_SECONDS = 60, 24 * 3600


def _tensor_parallel(spec: TideDeploymentSpec) -> list[Problem]:
    tp, gpus = spec.target.tensor_parallel_size, spec.inference.gpus_per_replica
    if gpus % tp:
        return [("spec.target.tensorParallelSize", f"{tp} must divide inference.gpusPerReplica ({gpus})")]
    return []


def _canary_replicas(spec: TideDeploymentSpec) -> list[Problem]:
    canary, replicas = spec.control.canary.replicas, spec.inference.replicas
    if replicas > 1 and canary >= replicas:
        return [("spec.control.canary.replicas", f"{canary} must be fewer than inference.replicas ({replicas})")]
    return []


def _draft_method(spec: TideDeploymentSpec) -> list[Problem]:
    if spec.draft.method not in SUPPORTED_DRAFT_METHODS:
        supported = ", ".join(SUPPORTED_DRAFT_METHODS)
        return [("spec.draft.method", f"{spec.draft.method} is not supported yet (supported: {supported})")]
    return []


def _extra_args(spec: TideDeploymentSpec) -> list[Problem]:
    return [
        (f"spec.inference.extraArgs[{index}]", f"{arg!r} sets {flag}, which the operator owns")
        for index, arg in enumerate(spec.inference.extra_args)
        if (flag := denied_flag(arg)) is not None
    ]


def _cost_profile(spec: TideDeploymentSpec) -> list[Problem]:
    profiles = [("spec.control.costProfile", spec.control.cost_profile)]
    profiles += [(f"spec.inference.servingGroups[{i}].costProfile", g.cost_profile)
                 for i, g in enumerate(spec.inference.serving_groups)]
    return [problem for path, profile in profiles if profile is not None
            for problem in _one_cost_profile(path, profile)]


def _one_cost_profile(path: str, profile: CostProfileSpec) -> list[Problem]:
    if (profile.config_map_ref is None) == (profile.points is None):
        return [(path, "set exactly one of configMapRef and points")]
    sizes = [point.batch_size for point in profile.points or ()]
    if len(set(sizes)) != len(sizes):
        return [(f"{path}.points", "batchSize values must be unique")]
    return []


def _capture(spec: TideDeploymentSpec) -> list[Problem]:
    capture = spec.control.capture
    if capture.kms_key_id is not None and capture.server_side_encryption != ServerSideEncryption.AWS_KMS:
        return [("spec.control.capture.kmsKeyId", "needs serverSideEncryption aws:kms")]
    return []


def _control_timing(spec: TideDeploymentSpec) -> list[Problem]:
    control = spec.control
    problems: list[Problem] = []
    if duration_seconds(control.interval) < MIN_INTERVAL_SECONDS:
        problems.append(("spec.control.interval", f"must be at least {MIN_INTERVAL_SECONDS}s"))
    if duration_seconds(control.drift.short_half_life) >= duration_seconds(control.drift.long_half_life):
        problems.append(("spec.control.drift.shortHalfLife", "must be shorter than drift.longHalfLife"))
    if control.training.sample_threshold > control.capture.max_buffer_samples:
        problems.append(("spec.control.training.sampleThreshold", "must not exceed control.capture.maxBufferSamples"))
    timeout = control.training.timeout
    if timeout is not None and duration_seconds(timeout) < MIN_TRAINING_TIMEOUT_SECONDS:
        problems.append(("spec.control.training.timeout", f"must be at least {MIN_TRAINING_TIMEOUT_SECONDS}s"))
    probe = duration_seconds(control.decision.probe_interval)
    if probe and not MIN_PROBE_INTERVAL_SECONDS <= probe <= MAX_PROBE_INTERVAL_SECONDS:
        problems.append(("spec.control.decision.probeInterval", "must be 0s (no probes) or from 1m to 24h"))
    return problems


def _positive_durations(spec: TideDeploymentSpec) -> list[Problem]:
    """Durations the control loop divides by (a half-life, a window split into measurements)."""
    control = spec.control
    problems: list[Problem] = []
    if duration_seconds(control.drift.short_half_life) == 0:
        problems.append(("spec.control.drift.shortHalfLife", "must be above 0s"))
    if duration_seconds(control.canary.analysis_window) == 0:
        problems.append(("spec.control.canary.analysisWindow", "must be above 0s"))
    return problems


MAX_DISRUPTION_COUNT = 64  # inference.replicas' bound
PERCENT_PATTERN = re.compile(r"^(100|[1-9]?[0-9])%$")


def _disruption(spec: TideDeploymentSpec) -> list[Problem]:
    """At most one of maxUnavailable and minAvailable (the CEL rule), each a count or a percentage."""
    disruption, path = spec.inference.disruption, "spec.inference.disruption"
    if disruption.max_unavailable is not None and disruption.min_available is not None:
        return [(path, "set at most one of maxUnavailable and minAvailable")]
    problems: list[Problem] = []
    for name, value in (("maxUnavailable", disruption.max_unavailable), ("minAvailable", disruption.min_available)):
        if isinstance(value, int) and not 0 <= value <= MAX_DISRUPTION_COUNT:
            problems.append((f"{path}.{name}", f"must be between 0 and {MAX_DISRUPTION_COUNT}"))
        if isinstance(value, str) and not PERCENT_PATTERN.match(value):
            problems.append((f"{path}.{name}", f"{value!r} must be a count or a percentage from 0% to 100%"))
    return problems


def _serving_group_bounds(spec: TideDeploymentSpec) -> list[Problem]:
    """Each group's maxReplicas at least its minReplicas (the CEL rule); tensor parallelism divides its GPUs."""
    problems: list[Problem] = []
    tp = spec.target.tensor_parallel_size
    for i, group in enumerate(spec.inference.serving_groups):
        path = f"spec.inference.servingGroups[{i}]"
        if group.max_replicas is not None and group.max_replicas < group.min_replicas:
            problems.append((f"{path}.maxReplicas", f"{group.max_replicas} must be at least minReplicas "
                                                    f"({group.min_replicas})"))
        if group.gpus_per_replica is not None and group.gpus_per_replica % tp:
            problems.append((f"{path}.gpusPerReplica", f"target.tensorParallelSize ({tp}) must divide it"))
    return problems


CEL_TWINS: tuple[Callable[[TideDeploymentSpec], list[Problem]], ...] = (
    _tensor_parallel,
    _canary_replicas,
    _draft_method,
    _extra_args,
    _cost_profile,
    _capture,
    _control_timing,
    _positive_durations,
    _disruption,
    _serving_group_bounds,
)


def _gpu_classes(spec: TideDeploymentSpec, known: Collection[str] | None) -> list[Problem]:
    problems: list[Problem] = []
    for pool in ("inference", "training"):
        classes = getattr(spec, pool).gpu_classes or ()
        if len(set(classes)) != len(classes):
            problems.append((f"spec.{pool}.gpuClasses", "must not repeat a class"))
        unknown = [name for name in classes if known is not None and name not in known]
        if unknown:
            problems.append(
                (
                    f"spec.{pool}.gpuClasses",
                    f"unknown GPU class {unknown[0]!r} (catalog: {', '.join(sorted(known or ()))})",
                )
            )
    return problems


# The lent replicas' Deployment is <name>-vllm-lent: a group of that name would take its name.
RESERVED_GROUP_NAMES = ("lent",)


def _serving_group_classes(spec: TideDeploymentSpec, known: Collection[str] | None) -> list[Problem]:
    """Each group a distinct class of the catalog, allowed by inference.gpuClasses where that is set."""
    problems: list[Problem] = []
    seen: set[str] = set()
    allowed = spec.inference.gpu_classes
    for i, group in enumerate(spec.inference.serving_groups):
        path, name = f"spec.inference.servingGroups[{i}].gpuClass", group.gpu_class
        if name.lower() in seen:
            problems.append((path, f"{name!r} is already a serving group"))
        elif name.lower() in RESERVED_GROUP_NAMES:
            problems.append((path, f"{name!r} is reserved (the lent replicas' group)"))
        elif known is not None and name not in known:
            problems.append((path, f"unknown GPU class {name!r} (catalog: {', '.join(sorted(known))})"))
        elif allowed and name not in allowed:
            problems.append((path, f"{name!r} is not in spec.inference.gpuClasses ({', '.join(allowed)})"))
        seen.add(name.lower())
    return problems


def cross_field_problems(spec: TideDeploymentSpec, known_gpu_classes: Collection[str] | None) -> list[Problem]:
    problems = [problem for rule in CEL_TWINS for problem in rule(spec)]
    return problems + _gpu_classes(spec, known_gpu_classes) + _serving_group_classes(spec, known_gpu_classes)
