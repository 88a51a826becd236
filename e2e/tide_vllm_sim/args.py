"""The vLLM server's command line (the flags that matter here) plus the simulator's own.

Every other vLLM flag is accepted and ignored, so the operator's manifests start the simulator
exactly as they start `vllm serve`.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import Any

SCENARIO_ENV = "TIDE_SIM_SCENARIO"
SEED_ENV = "TIDE_SIM_SEED"


@dataclass(frozen=True)
class ServerArgs:
    model: str
    served_model_name: str
    host: str
    port: int
    speculative_config: dict[str, Any] | None
    scheduler_cls: str | None
    max_num_seqs: int
    scenario: str | None  # YAML path (flag or TIDE_SIM_SCENARIO); None: the built-in default
    seed: int | None  # overrides the scenario's seed
    shutdown_timeout: int = 0  # vLLM's --shutdown-timeout: on SIGTERM requests in flight get this long (0: aborted)

    @property
    def num_speculative_tokens(self) -> int:
        if not self.speculative_config:
            return 0
        return int(self.speculative_config.get("num_speculative_tokens", 3))


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    parser = argparse.ArgumentParser(prog="tide_vllm_sim", description="vLLM stand-in (deterministic simulator)")
    parser.add_argument("model_tag", nargs="?", default=None, help="`vllm serve MODEL` form")
    parser.add_argument("--model", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--speculative-config", "-sc", default=None)
    parser.add_argument("--scheduler-cls", default=None)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--shutdown-timeout", type=int, default=0)
    parser.add_argument("--sim-scenario", default=os.environ.get(SCENARIO_ENV) or None)
    parser.add_argument("--sim-seed", type=int, default=_env_int(SEED_ENV))
    args, _unknown = parser.parse_known_args(argv)
    model = args.model or args.model_tag
    if not model:
        parser.error("--model (or a positional model) is required")
    spec = json.loads(args.speculative_config) if args.speculative_config else None
    if spec is not None and not isinstance(spec, dict):
        parser.error("--speculative-config must be a JSON object")
    return ServerArgs(
        model=model, served_model_name=(args.served_model_name or [model])[0], host=args.host, port=args.port,
        speculative_config=spec, scheduler_cls=args.scheduler_cls, max_num_seqs=args.max_num_seqs,
        scenario=args.sim_scenario, seed=args.sim_seed, shutdown_timeout=args.shutdown_timeout,
    )


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name)
    return int(raw) if raw else None
