"""`python -m tide_trainer train|init|recall`: the Job entrypoints. Arguments, environment and exit codes are a contract
(docs/contracts/trainer-cli.md); the flags are generated from TrainConfig so they cannot drift from it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from enum import IntEnum
from pathlib import Path
from typing import Any, NoReturn, get_args

import torch
import torch.distributed as dist
from pydantic import BaseModel, ValidationError

from tide_contracts.shards import ShardError
from tide_trainer.bootstrap import run_init
from tide_trainer.config import InitConfig, RecallConfig, TrainConfig, load_config_file
from tide_trainer.data import IncompatibleDataError, NoDataError
from tide_trainer.recall import NoDraftError, run_recall
from tide_trainer.run import run_training
from tide_trainer.starting_point import IncompatibleDraftError
from tide_trainer.storage import StorageError

log = logging.getLogger("tide_trainer")
# Kubernetes mounts this file into the container and shows its text in the Pod status after exit
TERMINATION_LOG_ENV, TERMINATION_LOG = "TIDE_TERMINATION_LOG", "/dev/termination-log"


class ExitCode(IntEnum):
    OK = 0  # candidate uploaded (or exported locally when no registry is configured)
    FAILED = 1  # unexpected error (a bug): traceback in the log
    BAD_CONFIG = 2
    NO_DATA = 3
    BAD_DATA = 4
    INCOMPATIBLE = 5
    STORAGE = 6
    NOT_BETTER = 7  # trained and evaluated, but did not beat the baseline: nothing uploaded
    NO_GPU = 8  # TIDE_TRAINER_REQUIRE_GPU=1 but torch sees no GPU (CUDA or ROCm): nothing trained
    NO_DRAFT = 9  # recall: the served draft, or every pooled one, could not be loaded and checked: no report


# Set by the operator on its Jobs ("1" unless the pool is CPU-only): a Job that asked for GPUs and
# sees none has the wrong image for the vendor or a node without a device plugin; training on CPU
# there would silently take days.
REQUIRE_GPU_ENV = "TIDE_TRAINER_REQUIRE_GPU"


_ERRORS: list[tuple[type[BaseException], ExitCode]] = [
    (ShardError, ExitCode.BAD_DATA), (NoDataError, ExitCode.NO_DATA),
    (IncompatibleDataError, ExitCode.INCOMPATIBLE), (IncompatibleDraftError, ExitCode.INCOMPATIBLE),
    (StorageError, ExitCode.STORAGE), (NoDraftError, ExitCode.NO_DRAFT),
]
_HANDLED = tuple(cls for cls, _ in _ERRORS)  # what main() turns into a documented exit code


class BadArguments(ValueError):
    """argparse's complaint, raised instead of exiting so the summary line is still written."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise BadArguments(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m tide_trainer", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command, model, what in (("train", TrainConfig, "train a candidate draft from captured hidden states"),
                                 ("init", InitConfig, "write a freshly initialised draft head for the target"),
                                 ("recall", RecallConfig, "score the served and the pooled drafts on the "
                                  "captures since a shift (no training)")):
        parser_ = sub.add_parser(command, help=what)
        parser_.add_argument("--config", type=Path, help=f"YAML or JSON file of {model.__name__} keys; flags override")
        for name, field in model.model_fields.items():
            repeated = field.annotation == list[str]  # --pooled-drafts A --pooled-drafts B
            parser_.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=field.description,
                                 action="append" if repeated else "store")
    return parser


_CONFIGS: dict[str, type[BaseModel]] = {"train": TrainConfig, "init": InitConfig, "recall": RecallConfig}


def config_from_args(args: argparse.Namespace) -> Any:
    """The subcommand's typed config (TrainConfig or InitConfig)."""
    model = _CONFIGS[args.command]
    values: dict[str, Any] = load_config_file(args.config) if args.config else {}
    for name, field in model.model_fields.items():
        raw = getattr(args, name)
        if raw is not None:
            values[name] = _parse_flag(raw, field.annotation)
    return model.model_validate(values)


def _parse_flag(raw: str | list[str], annotation: Any) -> Any:
    if isinstance(raw, list):  # a repeated flag: one value each time
        return raw
    if list in (getattr(a, "__origin__", None) for a in (annotation, *get_args(annotation))):
        return [int(x) for x in raw.strip("[]").split(",") if x.strip()]  # --aux-layer-ids 1,2,3
    return raw  # pydantic converts numbers and checks literals


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = config_from_args(build_parser().parse_args(argv))
    except (ValidationError, ValueError, OSError) as e:
        log.error("bad config: %s", e)
        return _finish(ExitCode.BAD_CONFIG, {"error": str(e)})
    if isinstance(cfg, InitConfig):
        return init(cfg)
    missing = missing_gpu()
    if missing:
        log.error("no_gpu: %s", missing)
        return _finish(ExitCode.NO_GPU, {"error": missing})
    if isinstance(cfg, RecallConfig):
        return recall(cfg)
    _init_distributed()
    try:
        outcome = run_training(cfg)
    except _HANDLED as e:
        return _failed(e)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    decision = outcome.report.get("decision", {})
    code = ExitCode.OK if outcome.better or not outcome.report else ExitCode.NOT_BETTER
    log.info("report %s: candidate %.3f vs %s %.3f -> %s", cfg.report_file,
             decision.get("candidate_acceptance_length", float("nan")), decision.get("baseline"),
             decision.get("baseline_acceptance_length", float("nan")), code.name)
    return _finish(code, {"report": str(cfg.report_file), "candidate": outcome.candidate_uri, **decision})


def _failed(e: BaseException) -> int:
    """The documented exit code of a known failure, logged and summarised."""
    code = next(c for cls, c in _ERRORS if isinstance(e, cls))
    log.error("%s: %s", code.name.lower(), e)
    return _finish(code, {"error": str(e)})


def init(cfg: InitConfig) -> int:
    """The bootstrap head: no GPU needed (a random layer and copies of the target's tensors)."""
    try:
        outcome = run_init(cfg)
    except _HANDLED as e:
        return _failed(e)
    log.info("bootstrap head %s at %s", "written" if outcome.created else "kept", outcome.uri)
    return _finish(ExitCode.OK, {"bootstrap": outcome.uri, "created": outcome.created})


def recall(cfg: RecallConfig) -> int:
    """Score the drafts and write recall.json: one process, no training, no candidate."""
    try:
        outcome = run_recall(cfg)
    except _HANDLED as e:
        return _failed(e)
    best = outcome.report.best()
    log.info("recall report %s: served %.3f, best pooled %s", outcome.uri, outcome.report.served_acceptance_length,
             f"{best.version} {best.acceptance_length:.3f}" if best else None)
    return _finish(ExitCode.OK, {"report": outcome.uri, "served_acceptance_length":
                                 outcome.report.served_acceptance_length,
                                 "scores": {s.version: s.acceptance_length for s in outcome.report.scores},
                                 "skipped": sorted(outcome.skipped)})


def missing_gpu() -> str | None:
    """Why this run must not start for want of a GPU, or None (ROCm torch reports through torch.cuda)."""
    if os.environ.get(REQUIRE_GPU_ENV, "0") != "1" or torch.cuda.is_available():
        return None
    return (f"GPUs were requested ({REQUIRE_GPU_ENV}=1) but torch {torch.__version__} sees no GPU: "
            "use the trainer image built for the pool's vendor (CUDA for NVIDIA, ROCm for AMD; operator "
            "config trainer.vendorImages) on a node whose device plugin exposes its GPUs, or mark a pool "
            "without GPUs trainer.cpuOnly")


def _init_distributed() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")


def _finish(code: ExitCode, summary: dict[str, Any]) -> int:
    """Print a one-line JSON summary and leave it where Kubernetes shows it to the operator."""
    line = json.dumps({"exit_code": int(code), "result": code.name.lower(), **summary})
    print(line, flush=True)
    termination = Path(os.environ.get(TERMINATION_LOG_ENV, TERMINATION_LOG))
    if termination.is_file():  # only where Kubernetes mounted it
        try:
            termination.write_text(line[:4000])  # the kubelet keeps 4 KiB
        except OSError:
            log.warning("could not write %s", termination)
    return int(code)
