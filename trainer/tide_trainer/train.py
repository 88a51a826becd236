"""The training loop: TTT loss, AdamW at a constant LR, gradient clipping, resumable checkpoints.

Reads top to bottom like nanoGPT's train.py. One code path for one process and for torchrun: with a
process group, the model is wrapped in DDP, each rank takes its stride of every batch group and the loss
is divided by the global token count, so N processes take the same steps as one.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tide_trainer.config import TrainConfig
from tide_trainer.data import Batch, NoDataError, Sample, iter_batches
from tide_trainer.model import DraftConfig, Eagle3Draft
from tide_trainer.objective import ttt_loss

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "checkpoint.pt"


@dataclass
class FitResult:
    steps: int
    tokens: int
    seconds: float
    last_loss: float


def pick_device_and_dtype(precision: str) -> tuple[torch.device, torch.dtype]:
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if precision == "bf16" and not bf16_ok:
        log.warning("precision bf16 requested but this device lacks it; training in fp32")
    use_bf16 = bf16_ok and precision in ("auto", "bf16")
    return device, (torch.bfloat16 if use_bf16 else torch.float32)


def steps_per_epoch(num_samples: int, batch_size: int, world_size: int) -> int:
    # full batch groups only under DDP, so no rank waits on a peer that ran out of data
    group = batch_size * world_size
    return num_samples // group if world_size > 1 else math.ceil(num_samples / group)


def plan_steps(num_samples: int, cfg: TrainConfig, world: int) -> tuple[int, int]:
    """(steps per epoch, total steps): epochs over the window, capped by max_steps."""
    per_epoch = steps_per_epoch(num_samples, cfg.batch_size, world)
    if per_epoch == 0:
        raise NoDataError(f"batch_size: {cfg.batch_size} x {world} processes exceeds the "
                          f"{num_samples} training samples")
    total = per_epoch * cfg.epochs
    return per_epoch, total if cfg.max_steps is None else min(cfg.max_steps, total)


def save_checkpoint(path: Path, model: Eagle3Draft, opt: torch.optim.Optimizer, step: int,
                    cfg: TrainConfig) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                "draft_config": model.cfg.to_dict(), "train_config": cfg.model_dump()}, tmp)
    tmp.replace(path)  # a crash mid-write leaves the previous checkpoint intact


def load_checkpoint(path: Path, model: Eagle3Draft, opt: torch.optim.Optimizer) -> int:
    state = torch.load(path, map_location="cpu", weights_only=True)
    if DraftConfig(**state["draft_config"]) != model.cfg:
        raise ValueError(f"{path}: checkpoint is for another draft shape; remove it or use a new work_dir")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    return int(state["step"])


def fit(model: Eagle3Draft, samples: list[Sample], cfg: TrainConfig) -> FitResult:
    """Train `model` in place on `samples`; resumes from <work_dir>/checkpoint.pt when present."""
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    master = rank == 0
    device, dtype = pick_device_and_dtype(cfg.precision)
    torch.manual_seed(cfg.seed)
    model.to(device)
    runner = DistributedDataParallel(model) if world > 1 else model
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)  # fp32 master weights

    per_epoch, total = plan_steps(len(samples), cfg, world)

    # resume
    ckpt = Path(cfg.work_dir) / CHECKPOINT_FILE
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    step = load_checkpoint(ckpt, model, opt) if ckpt.exists() else 0
    if step and master:
        log.info("resumed from %s at step %d", ckpt, step)

    started, tokens, last_loss = time.monotonic(), 0, float("nan")
    while step < total:
        epoch, skip = divmod(step, per_epoch)
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)  # same order on every rank
        batches = iter_batches(samples, cfg.batch_size, gen, rank, world)
        for batch_index, batch in enumerate(batches):
            if batch_index < skip:
                continue  # already trained before the resume
            if batch_index >= per_epoch or step >= total:
                break
            last_loss, n = train_step(runner, model, opt, batch.to(device, torch.float32),
                                         cfg=cfg, dtype=dtype, world=world)
            tokens, step = tokens + n, step + 1
            if master and (step % cfg.log_every == 0 or step == total):
                log_progress(step, total, last_loss, tokens * world, time.monotonic() - started)
            if master and (step % cfg.checkpoint_every == 0 or step == total):
                save_checkpoint(ckpt, model, opt, step, cfg)
        if world > 1:
            dist.barrier()  # ranks start the next epoch together (the checkpoint is written)
    return FitResult(step, tokens * world, time.monotonic() - started, last_loss)


def train_step(runner: torch.nn.Module, model: Eagle3Draft, opt: torch.optim.Optimizer, batch: Batch, *,
               cfg: TrainConfig, dtype: torch.dtype, world: int) -> tuple[float, int]:
    """One optimizer step; returns the loss and the supervised tokens of this process."""
    local = int(batch.step_targets(0)[1].sum())
    normaliser = float(local)
    if world > 1:  # divide by the global count: DDP averages gradients, so scale back by world
        count = torch.tensor([local], dtype=torch.float64, device=batch.labels.device)
        dist.all_reduce(count)
        normaliser = max(float(count.item()), 1.0) / world
    with torch.autocast(device_type=batch.labels.device.type, dtype=dtype, enabled=dtype != torch.float32):
        losses = ttt_loss(model, batch, cfg.ttt_steps, decay=cfg.loss_decay, normaliser=max(normaliser, 1.0),
                          forward=runner)
    opt.zero_grad(set_to_none=True)
    losses.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], cfg.grad_clip)
    opt.step()
    return float(losses.loss.detach()), local


def log_progress(step: int, total: int, loss: float, tokens: int, seconds: float) -> None:
    rate = tokens / max(seconds, 1e-9)
    eta = seconds / step * (total - step)
    log.info("step %d/%d | loss %.4f | %.0f tok/s | elapsed %s | eta %s", step, total, loss, rate,
             _clock(seconds), _clock(eta))


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
