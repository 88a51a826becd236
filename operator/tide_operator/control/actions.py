"""Typed actions the policy asks the operator to carry out; each says why (reason) and with what numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

Bands = tuple[tuple[int, int, int], ...]  # speculative tokens per batch-size band: (first, last, K), inclusive


@dataclass(frozen=True)
class SetSpeculation:
    """Turn speculation on or off; tokens_per_batch_size is vLLM's [[start_bs, end_bs, K], ...] table."""

    enabled: bool
    num_speculative_tokens: int
    tokens_per_batch_size: Bands | None
    reason: str
    message: str
    # The acceptance the table was made for: a serving group with its own cost profile gets its own table
    # at it (serving_groups.ClassTables). Not part of what the action is: equal tables are equal actions.
    acceptance: float | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SetCapture:
    enabled: bool
    reason: str
    message: str


@dataclass(frozen=True)
class LaunchTraining:
    """Start trainer Job `run_id` (deterministic, so a restart adopts the Job instead of repeating it).

    ``captured_since``: when the current workload shift began (epoch s, the policy's clock); the run
    claims only shards captured since then, older ones are the traffic before the shift. None (no
    shift seen, e.g. the first run) claims the newest window of the whole buffer.
    """

    run_id: str
    reason: str
    message: str
    captured_since: float | None = None


@dataclass(frozen=True)
class LaunchRecall:
    """Start evaluation Job `run_id` (trainer image, no training): score the served draft and each of
    ``versions`` (the draft pool's, `initial` or vN) on the samples captured since ``captured_since``;
    it writes candidates/<run_id>/recall.json (tide_contracts.recall)."""

    run_id: str
    versions: tuple[str, ...]
    reason: str
    message: str
    captured_since: float | None = None


@dataclass(frozen=True)
class CancelTraining:
    """Delete the Job of run `run_id`, a trainer's or a recall evaluation's."""

    run_id: str
    reason: str
    message: str


@dataclass(frozen=True)
class StartCanary:
    candidate: str  # a run_id under candidates/, or a pooled version (`initial`, vN) when ``recalled``
    replicas: int
    reason: str
    message: str
    pods: tuple[str, ...] = ()  # the pods that load it (chosen by the lifecycle, kept in its state)
    # The fleet does not speculate: the canary pods speculate with the candidate on their own, with
    # this table (None: the launch table, K at every batch size), until the canary ends.
    speculate: bool = False
    tokens_per_batch_size: Bands | None = None
    recalled: bool = False


@dataclass(frozen=True)
class Promote:
    """Promote the candidate to every pod; the registry assigns the next vN, or, ``recalled``, points
    at the pooled version the candidate names (it keeps its version: no copy)."""

    candidate: str
    reason: str
    message: str
    recalled: bool = False


@dataclass(frozen=True)
class RollBack:
    """Swap the canary pods back to the promoted draft; the pointer is left unchanged."""

    candidate: str
    reason: str
    message: str
    pods: tuple[str, ...] = ()  # the canary pods recorded when it started (gone ones are skipped)


@dataclass(frozen=True)
class ServeDraft:
    """Serve this promoted version everywhere (draft pin); None = no draft (speculation off)."""

    version: str | None
    reason: str
    message: str


@dataclass(frozen=True)
class InvalidateArtifacts:
    """The target changed: captures and candidates for other revisions are useless, drop them."""

    target_revision: str
    reason: str
    message: str


@dataclass(frozen=True)
class FlipPointer:
    """Point the registry at an already promoted version and serve it everywhere: a user's request
    (control/manual.py), never the policy's, so it is not one of ``Action``.

    ``version`` None: the version served before the current one (a rollback).
    """

    version: str | None
    rollback: bool
    reason: str
    message: str
    annotation: str = ""  # the request it answers


Action = (
    SetSpeculation
    | SetCapture
    | LaunchTraining
    | LaunchRecall
    | CancelTraining
    | StartCanary
    | Promote
    | RollBack
    | ServeDraft
    | InvalidateArtifacts
)
