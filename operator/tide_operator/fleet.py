"""The vLLM pods of one TideDeployment, driven through the serving plugin's control routes.

Pods are reached by pod IP on the plugin's control port (the NetworkPolicy lets only the operator
in), authenticated with the per-deployment token from the control Secret.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
from tide_operator.control_loop import DraftRefused, EffectError

ClientFactory = Callable[[str, str], Any]
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


class Fleet:
    def __init__(self, pods: Sequence[ServingPod], port: int, token: str, previous_token: str = "",
                 client_factory: ClientFactory = ServingControlClient) -> None:
        self.pods = [p for p in pods if p.ip]
        self.port, self.token, self.previous_token, self._client = port, token, previous_token, client_factory
        self._statuses: dict[bool, dict[str, ServingStatus | None]] = {}  # by ready_only, until a pod is told

    def client(self, pod: ServingPod) -> Any:
        url = f"http://{pod.ip}:{self.port}"
        current = self._client(url, self.token)
        return _RotatingClient(current, self._client(url, self.previous_token)) if self.previous_token else current

    def _each(self, what: str, call: Callable[[Any], Any], pods: Sequence[ServingPod] | None = None) -> None:
        """Call every (ready) pod; one failure fails the effect, naming each pod and why.

        A pod that refused a draft's files (it verifies before it swaps, so it still serves the
        old one) raises DraftRefused: the draft is bad, not the pod.
        """
        self._statuses.clear()  # what the pods report may change now
        failures, refusals, restarts = [], [], 0
        for pod in pods if pods is not None else [p for p in self.pods if p.ready]:
            try:
                call(self.client(pod))
            except (ServingControlError, OSError) as e:
                failures.append(f"{pod.name}: {e}")
                if isinstance(e, ServingControlError) and e.code in DRAFT_REFUSALS:
                    refusals.append(DRAFT_REFUSALS[e.code])
                restarts += isinstance(e, ServingControlError) and e.code is ErrorCode.RESTART_REQUIRED
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
        self._each(f"loading draft {version or source}", lambda c: c.load_draft(request), pods)

    def statuses(self, ready_only: bool = False) -> dict[str, ServingStatus | None]:
        """Each pod's status, None where it did not answer; read once until a call changes a pod
        (one pass asks for the batch cap, the canary's pods and the stragglers)."""
        if ready_only not in self._statuses:
            out: dict[str, ServingStatus | None] = {}
            for pod in (p for p in self.pods if p.ready or not ready_only):
                try:
                    out[pod.name] = self.client(pod).status()
                except (ServingControlError, OSError):
                    out[pod.name] = None
            self._statuses[ready_only] = out
        return dict(self._statuses[ready_only])
