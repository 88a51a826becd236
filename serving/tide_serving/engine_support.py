"""Which vLLM versions and model runners this plugin's code paths were tested with.

The plugin reaches into vLLM internals (runner state, layerwise reload, the scheduler's
speculative-token table), so on a version it was not tested with it stays inert: routes answer
`unsupported_engine`, `tide_serving_plugin_info{engine_supported="false"}`, and the log says why.
`TIDE_ALLOW_UNTESTED_VLLM=1` overrides (used by the prepared GPU check for the V2 runner).
"""

from __future__ import annotations

from dataclasses import dataclass

from tide_contracts.versions import VLLM_VERSION

# version -> runners verified there. The images pin the same vLLM (tide_contracts/versions.py, the
# one version story). 0.33.0's V2 runner path is written but only a prepared GPU check exists
# (bench/serving_gpu_check.py), so it needs the override until that check has passed.
TESTED = {VLLM_VERSION: ("v1",)}


@dataclass(frozen=True)
class EngineSupport:
    vllm_version: str
    runner: str  # "v1" | "v2"
    supported: bool
    reason: str


def check_engine(vllm_version: str, runner: str, allow_untested: bool) -> EngineSupport:
    runners = TESTED.get(vllm_version)
    if runners is not None and runner in runners:
        return EngineSupport(vllm_version, runner, True, f"tested on vLLM {vllm_version} ({runner} runner)")
    why = (f"vLLM {vllm_version} with the {runner} model runner is untested "
           f"(tested: {', '.join(f'{v} {r}' for v, rs in TESTED.items() for r in rs)})")
    if allow_untested:
        return EngineSupport(vllm_version, runner, True, why + "; enabled by TIDE_ALLOW_UNTESTED_VLLM=1")
    return EngineSupport(vllm_version, runner, False, why + "; the plugin stays inert")


def runner_kind(model_runner: object) -> str:
    """'v2' for vllm/v1/worker/gpu/model_runner.py, else 'v1'."""
    return "v2" if type(model_runner).__module__.startswith("vllm.v1.worker.gpu.") else "v1"
