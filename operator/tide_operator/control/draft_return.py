"""Traffic back on a pooled draft's domain, seen in the captures' signatures (issue 16).

Acceptance tells a return home only when the served draft does worse or better there than away, by
the drift threshold. A draft adapted away can serve both domains alike and still do worse at home
than the draft trained there: in a whole-loop e2e run, v2 (prose, trained from the code draft v1)
accepted 2.85 on code and 2.88 on prose, and neither a fall nor a rise was seen; on the recurring
code traffic of a later run the evaluation scored v1 3.43 against v2's 3.21.

While capture is on, every shard carries its rows' domain signature in its metadata
(tide_contracts.signature), and every pooled draft the signature of the traffic it was trained on
(its manifest's). When the newest captures are clearly nearer a pooled draft's traffic than the
served draft's, the traffic returned: the lifecycle treats it as a shift and scores the pool on it
(lifecycle_recall.py); the evaluation, not the signature, decides whether anything is recalled
(docs/draft-pool.md: the signature ranks domains, it cannot tell a good draft from a bad one).

Traffic can also come back while a round collects or its pool evaluation runs, before anything was
promoted for it: a round begun on a rise, or on a fall, whose evaluation scores the pool on samples the
traffic has left since (a whole-loop CI run: the round began on prose, code came back during its
evaluation, the pool lost on prose and the next round trained on both, so the home draft was never
recalled). Acceptance may not move at all there. So a round that holds two windows of captures compares
its newest window with its oldest too: nearer a pooled draft's traffic than the round's own start, the
round's samples are stale and the traffic returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tide_contracts.draft_pool import DomainSignature, DraftPool, signature_distance
from tide_contracts.registry import CaptureObject
from tide_contracts.signature import merge_signatures
from tide_operator.control.lifecycle_types import LifecycleState, Phase

# The newest window must be this many times nearer the pooled draft's traffic than the served draft's:
# a mixed window sits about as near both and is no return (tiny target, code and prose: a whole-domain
# window 27-135x, three quarters of one domain 2.7-8x, half and half 0.8-1.2x).
RETURN_RATIO = 4.0
# And this far from the served draft's traffic at least (symmetric KL per dimension): two drafts of one
# domain have near-equal signatures, whose ratio is noise (tiny target: 64 requests of one domain lie
# 0.001-0.003 from another sample of it, 0.07-0.09 from the other domain).
MIN_RETURN_DISTANCE = 0.02
# Objects without a signature (an older plugin, a dropped HEAD): the window is judged only when at
# most this share of its requests lack one.
MAX_UNSIGNED_SHARE = 0.2


@dataclass(frozen=True)
class TrafficSignatures:
    """What a return is judged on: the newest captures' signature and the drafts' training traffic."""

    window: DomainSignature
    served: DomainSignature | None  # the served draft's (None: the launch draft, or a manifest without one)
    pooled: tuple[tuple[str, DomainSignature], ...]  # the pool's other drafts that have one
    round_start: DomainSignature | None = None  # the round's oldest captures (ReturnWindows.round_start)


@dataclass(frozen=True)
class ReturnWindows:
    """The newest captures of a round, and what they are compared with besides the pooled drafts'."""

    newest: DomainSignature
    # A next round after a promotion since the last shift: the served draft's traffic is the reference
    # (before the promotion, the pool was scored on this shift's traffic already, or is about to be).
    against_served: bool
    # The round's oldest captures, once it holds two windows: what its samples were when it began.
    round_start: DomainSignature | None


def return_windows(lifecycle: LifecycleState, captures: Sequence[CaptureObject],
                   sample_threshold: int) -> ReturnWindows | None:
    """A round that captures (Collecting, Recalling): the newest ``sample_threshold`` requests captured in it,
    with the round's first ones when it holds twice that. None in any other phase, or before there is
    anything to compare (a round before a promotion needs two windows of its own)."""
    if lifecycle.phase not in (Phase.COLLECTING, Phase.RECALLING):
        return None
    after_promotion = (lifecycle.phase is Phase.COLLECTING and not lifecycle.recall_only
                       and promoted_since_shift(lifecycle))
    since = (lifecycle.phase_since or lifecycle.last_promotion_at or 0.0) if after_promotion else lifecycle.shift_at
    if since is None:
        return None
    newest = window_signature(captures, since, sample_threshold)
    if newest is None:
        return None
    start = window_signature(captures, since, sample_threshold, oldest=True, disjoint_from=sample_threshold)
    if not after_promotion and start is None:
        return None
    return ReturnWindows(newest, after_promotion, start)


def promoted_since_shift(lifecycle: LifecycleState) -> bool:
    """A draft was promoted after the last shift: the pool was scored on that shift's traffic already (or
    the shift was trained for), so only traffic that changed since is news; a return tried once is a shift
    itself, and the next try waits for the next promotion."""
    promoted = lifecycle.last_promotion_at
    return promoted is not None and (lifecycle.shift_at is None or promoted >= lifecycle.shift_at)


def against_pool(windows: ReturnWindows, pool: DraftPool, served: str | None,
                 offered: Sequence[str]) -> TrafficSignatures:
    """The window against the served draft's entry (a next round after a promotion), the round's start, and
    the ``offered`` pooled drafts' that carry a signature."""
    signatures = {e.version: e.signature for e in pool.entries}
    pooled = tuple((v, sig) for v in offered if (sig := signatures.get(v)) is not None)
    reference = signatures.get(served) if served and windows.against_served else None
    return TrafficSignatures(windows.newest, reference, pooled, windows.round_start)


def window_signature(captures: Sequence[CaptureObject], since: float, min_samples: int, *, oldest: bool = False,
                     disjoint_from: int = 0) -> DomainSignature | None:
    """The newest captures written after ``since``, newest first until they hold ``min_samples`` requests
    (``oldest``: the first ones, oldest first, and only when at least ``disjoint_from`` more requests came
    after them, so that they share no capture with the newest window).

    None when fewer were captured since, or too many of them carry no signature to say what they are.
    """
    ordered = sorted((c for c in captures if c.last_modified > since), key=lambda c: (c.last_modified, c.key),
                     reverse=not oldest)
    window: list[CaptureObject] = []
    for capture in ordered:
        window.append(capture)
        if sum(c.samples for c in window) >= min_samples:
            break
    if oldest and sum(c.samples for c in ordered[len(window):]) < disjoint_from:
        return None
    total = sum(c.samples for c in window)
    unsigned = sum(c.samples for c in window if c.signature is None)
    if total < min_samples or unsigned > MAX_UNSIGNED_SHARE * total:
        return None
    try:
        return merge_signatures(c.signature for c in window if c.signature is not None)
    except ValueError:  # shards of different projections (pods of two plugin versions): no verdict
        return None


def returned_to(traffic: TrafficSignatures, ratio: float = RETURN_RATIO,
                min_distance: float = MIN_RETURN_DISTANCE) -> str | None:
    """The pooled draft whose training traffic the window is clearly nearest, if the served draft's is not
    (or, within a round, the traffic the round began on)."""
    for reference in (traffic.served, traffic.round_start):
        version = _clearly_nearer(traffic, reference, ratio, min_distance) if reference is not None else None
        if version is not None:
            return version
    return None


def _clearly_nearer(traffic: TrafficSignatures, reference: DomainSignature, ratio: float,
                    min_distance: float) -> str | None:
    if not traffic.pooled:
        return None
    try:
        from_reference = signature_distance(traffic.window, reference)
        ranked = sorted((signature_distance(traffic.window, sig), version) for version, sig in traffic.pooled
                        if sig.projection == traffic.window.projection and len(sig.mean) == len(traffic.window.mean))
    except ValueError:  # the reference is of another projection: nothing to compare with
        return None
    if not ranked or from_reference < min_distance:
        return None
    nearest, version = ranked[0]
    return version if from_reference >= ratio * nearest else None
