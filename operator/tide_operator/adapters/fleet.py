"""The vLLM pods of one TideDeployment, driven through the serving plugin's control routes.

Pods are reached by pod IP on the plugin's control port (the NetworkPolicy lets only the operator
in), authenticated with the per-deployment token from the control Secret.

Each fan-out runs on a thread pool of its own (operator config podCalls.parallelism), every call with
a deadline (the client's socket timeout, and a wait bounded by it), so a hung pod costs a pass one
deadline instead of holding it for the sum of every pod's timeout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from tide_contracts.serving_control import (
    CaptureRequest,
    DraftLoadRequest,
    ErrorCode,
    ServingControlClient,
    ServingControlError,
    ServingStatus,
    SpeculationRequest,
)
from tide_operator.api.conditions import Reason
from tide_operator.config import PodCallsConfig
from tide_operator.passes.control_loop import DraftRefused, EffectError

ClientFactory = Callable[[str, str, float], Any]  # (base URL, token, timeout in seconds) -> client
# Serving contract errors that say the draft's files are unfit (not that the pod is unwell).
DRAFT_REFUSALS = {
    ErrorCode.CHECKSUM_MISMATCH: Reason.CHECKSUM_MISMATCH,
    ErrorCode.MANIFEST_INVALID: Reason.MANIFEST_INVALID,
    ErrorCode.TARGET_REVISION_MISMATCH: Reason.INCOMPATIBLE_DRAFT,
    ErrorCode.ARCHITECTURE_MISMATCH: Reason.INCOMPATIBLE_DRAFT,
}


class RestartRequired(EffectError):
    """Every pod that failed can change this only by a restart with a new serving configuration."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Reason.SERVING_PODS_UNREACHABLE)


class _RotatingClient:
    """During a token rotation: a pod whose kubelet has not yet delivered the new token answers 401 to
    it; the same call goes again with the previous one (still in the Secret for the grace period)."""

    def __init__(self, current: Any, previous: Any) -> None:
        self._current, self._previous = current, previous

    def __getattr__(self, method: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return getattr(self._current, method)(*args, **kwargs)
            except ServingControlError as e:
                if e.code is not ErrorCode.UNAUTHORIZED:
                    raise
                return getattr(self._previous, method)(*args, **kwargs)
        return call


@dataclass(frozen=True)
class ServingPod:
    name: str
    ip: str
    ready: bool
    lent: bool = False  # a lent replica on the training class (training.lendWhenIdle): drained before a Job
    gpu_class: str | None = None  # its tide.dev/gpu-class label: a serving group's own speculative tokens


class NoAnswer(OSError):
    """The call's deadline passed before the pod answered (it may still finish: calls are idempotent)."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(f"no answer within {deadline_s:g} s")


class Fleet:
    def __init__(self, pods: Sequence[ServingPod], port: int, token: str, previous_token: str = "",
                 client_factory: ClientFactory = ServingControlClient, calls: PodCallsConfig | None = None) -> None:
        self.pods = sorted((p for p in pods if p.ip), key=lambda p: p.name)
        self.port, self.token, self.previous_token, self._client = port, token, previous_token, client_factory
        self.calls = calls or PodCallsConfig()
        self._statuses: dict[bool, dict[str, ServingStatus | None]] = {}  # by ready_only, until a pod is told

    def client(self, pod: ServingPod, timeout_s: float | None = None) -> Any:
        url, timeout = f"http://{pod.ip}:{self.port}", timeout_s or self.calls.status_deadline_seconds
        current = self._client(url, self.token, timeout)
        return _RotatingClient(current, self._client(url, self.previous_token, timeout)) if self.previous_token else (
            current)

    def _call_all(self, pods: Sequence[ServingPod], call: Callable[[Any], Any],
                  deadline_s: float) -> dict[str, Any]:
        """Each pod's answer, or the exception it raised (NoAnswer past its deadline), by pod name.

        The wait is bounded by deadline x rounds of the pool; a call still running then is left to its
        socket timeout (the same deadline) on a thread the pass no longer waits for.
        """
        pods = sorted(pods, key=lambda p: p.name)
        if not pods:
            return {}
        workers = min(self.calls.parallelism, len(pods))
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tide-pod-call")
        try:
            futures = {pod.name: pool.submit(call, self.client(pod, deadline_s)) for pod in pods}
            wait(futures.values(), timeout=deadline_s * math.ceil(len(pods) / workers) + 0.05)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return {name: _outcome(future, deadline_s) for name, future in futures.items()}

    def _each(self, what: str, call: Callable[[Any], Any], pods: Sequence[ServingPod] | None = None,
              deadline_s: float | None = None) -> None:
        """Call every (ready) pod; one failure fails the effect, naming each pod and why.

        A pod that refused a draft's files (it verifies before it swaps, so it still serves the
        old one) raises DraftRefused: the draft is bad, not the pod.
        """
        self._statuses.clear()  # what the pods report may change now
        failures, refusals, restarts = [], [], 0
        targets = pods if pods is not None else [p for p in self.pods if p.ready]
        for name, e in self._call_all(targets, call, deadline_s or self.calls.switch_deadline_seconds).items():
            if isinstance(e, (ServingControlError, OSError)):
                failures.append(f"{name}: {e}")
                if isinstance(e, ServingControlError) and e.code in DRAFT_REFUSALS:
                    refusals.append(DRAFT_REFUSALS[e.code])
                restarts += isinstance(e, ServingControlError) and e.code is ErrorCode.RESTART_REQUIRED
            elif isinstance(e, BaseException):
                raise e  # not a pod's answer: a bug, as when the calls ran one by one
        message = f"{what} failed on {len(failures)} pod(s): " + "; ".join(failures)
        if refusals:
            raise DraftRefused(refusals[0], message)
        if failures and restarts == len(failures):
            raise RestartRequired(message)
        if failures:
            raise EffectError(message, Reason.SERVING_PODS_UNREACHABLE)

    def set_speculation(self, enabled: bool, bands: Sequence[Sequence[int]] | None = None,
                        pods: Sequence[ServingPod] | None = None) -> None:
        """On (with speculative tokens per batch-size band, or the launch table) or off."""
        request = SpeculationRequest(enabled=enabled, tokens_per_batch_size=[
            (int(a), int(b), int(k)) for a, b, k in bands] if enabled and bands else None)
        self._each("speculation " + ("on" if enabled else "off"), lambda c: c.set_speculation(request), pods)

    def set_capture(self, enabled: bool, sampling_rate: float | None, destination: str | None,
                    pods: Sequence[ServingPod] | None = None) -> None:
        request = CaptureRequest(enabled=enabled, sampling_rate=sampling_rate, destination=destination)
        self._each("capture " + ("on" if enabled else "off"), lambda c: c.set_capture(request), pods)

    def load_draft(self, source: str, version: str | None, pods: Sequence[ServingPod] | None = None,
                   manifest_sha256: str | None = None) -> None:
        request = DraftLoadRequest(source=source, version=version, manifest_sha256=manifest_sha256)
        self._each(f"loading draft {version or source}", lambda c: c.load_draft(request), pods,
                   self.calls.draft_load_deadline_seconds)

    def statuses(self, ready_only: bool = False) -> dict[str, ServingStatus | None]:
        """Each pod's status, None where it did not answer; read once until a call changes a pod
        (one pass asks for the batch cap, the canary's pods and the stragglers)."""
        if ready_only not in self._statuses:
            answers = self._call_all([p for p in self.pods if p.ready or not ready_only], lambda c: c.status(),
                                     self.calls.status_deadline_seconds)
            for answer in answers.values():
                if isinstance(answer, BaseException) and not isinstance(answer, (ServingControlError, OSError)):
                    raise answer
            self._statuses[ready_only] = {name: None if isinstance(answer, BaseException) else answer
                                          for name, answer in answers.items()}
        return dict(self._statuses[ready_only])


def _outcome(future: Future[Any], deadline_s: float) -> Any:
    """The call's result, or the exception it raised (returned, not raised), or NoAnswer."""
    if future.cancelled() or not future.done():  # still running, or never started (the pool was shut down)
        return NoAnswer(deadline_s)
    error = future.exception()
    return error if error is not None else future.result()
