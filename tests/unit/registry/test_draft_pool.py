"""The draft pool's index (issue 16): bounded, least recently served first out, pins and the served
draft never leave, a new target empties it, signatures compare traffic."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tide_contracts.draft_pool import (
    DomainSignature,
    DraftPool,
    for_target,
    nearest,
    served,
    signature_distance,
)
from tide_contracts.registry import Manifest, manifest_json

CODE = DomainSignature(mean=(1.0, 0.0, 2.0), std=(1.0, 1.0, 0.5), tokens=4000)
PROSE = DomainSignature(mean=(-1.0, 2.0, 0.0), std=(1.5, 1.0, 1.0), tokens=3000)
NEAR_CODE = DomainSignature(mean=(0.9, 0.1, 2.1), std=(1.1, 1.0, 0.5), tokens=500)


def pool_of(*versions: str) -> DraftPool:
    pool = DraftPool(target_revision="r1")
    for t, version in enumerate(versions):
        pool, _ = served(pool, version, float(t), max_drafts=10)
    return pool


def test_the_least_recently_served_leaves_the_index_first() -> None:
    pool = pool_of("initial", "v1", "v2", "v3")
    pool, _ = served(pool, "v1", 10.0)  # v1 serves again: now the most recent
    pool, left = served(pool, "v4", 11.0, CODE)
    assert left == ["initial"]
    pool, left = served(pool, "v5", 12.0, max_drafts=4)
    assert left == ["v2"]
    assert [e.version for e in pool.entries] == ["v3", "v1", "v4", "v5"]
    assert pool.entry("v4").signature == CODE


def test_pinned_and_serving_drafts_never_leave_even_above_the_bound() -> None:
    pool = pool_of("v1", "v2", "v3")
    pool, left = served(pool, "v4", 10.0, max_drafts=2, pinned={"v1"})
    assert left == ["v2", "v3"]  # v1 is the least recently served, but pinned
    assert [e.version for e in pool.entries] == ["v1", "v4"]
    pool, left = served(pool, "v5", 11.0, max_drafts=1, pinned={"v1"})
    assert left == ["v4"]
    assert [e.version for e in pool.entries] == ["v1", "v5"]  # the bound yields to the pin and the served draft
    with pytest.raises(ValueError, match="max_drafts"):
        served(pool, "v6", 12.0, max_drafts=0)


def test_a_known_draft_keeps_its_signature_when_recalled() -> None:
    pool, _ = served(DraftPool(target_revision="r1"), "v2", 1.0, CODE)
    pool, _ = served(pool, "v2", 50.0)  # recalled: no retraining, no new signature
    entry = pool.entry("v2")
    assert (entry.signature, entry.added_at, entry.last_served_at) == (CODE, 1.0, 50.0)


def test_a_new_target_or_tokenizer_empties_the_pool() -> None:
    pool = pool_of("v1", "v2").model_copy(update={"tokenizer_hash": "tok-1"})
    assert for_target(pool, "r1", "tok-1") is pool
    assert for_target(pool, "r2", "tok-1").entries == ()
    assert for_target(pool, "r1", "tok-2").entries == ()
    assert for_target(None, "r1", None) == DraftPool(target_revision="r1")


def test_an_unknown_tokenizer_is_not_another_tokenizer() -> None:
    """The launch draft is recorded before any manifest names the tokenizer: the first that does keeps the
    pool (the same target revision serves one tokenizer) and the pool learns the hash; a record without one
    keeps it."""
    launch, _ = served(DraftPool(target_revision="r1"), "initial", 1.0)
    learnt = for_target(launch, "r1", "tok-1")
    assert (learnt.tokenizer_hash, [e.version for e in learnt.entries]) == ("tok-1", ["initial"])
    assert for_target(learnt, "r1", None) is learnt
    assert for_target(learnt, "r1", "tok-2").entries == ()


def test_signatures_rank_the_pool_by_how_close_its_traffic_was() -> None:
    assert signature_distance(CODE, CODE) == 0.0
    assert signature_distance(CODE, PROSE) == pytest.approx(signature_distance(PROSE, CODE))
    assert signature_distance(CODE, NEAR_CODE) < signature_distance(PROSE, NEAR_CODE)
    pool, _ = served(DraftPool(target_revision="r1"), "v1", 1.0, CODE)
    pool, _ = served(pool, "v2", 2.0, PROSE)
    pool, _ = served(pool, "initial", 3.0)  # no signature: not ranked
    assert [v for v, _ in nearest(pool, NEAR_CODE)] == ["v1", "v2"]
    assert [v for v, _ in nearest(pool, NEAR_CODE, exclude=["v1"])] == ["v2"]


@pytest.mark.parametrize("bad", [
    {"mean": (1.0,), "std": (1.0, 2.0), "tokens": 1},
    {"mean": (1.0,), "std": (0.0,), "tokens": 1},
    {"mean": (float("nan"),), "std": (1.0,), "tokens": 1},
    {"mean": (1.0,), "std": (1.0,), "tokens": 0},
])
def test_a_malformed_signature_is_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        DomainSignature(**bad)


def test_signatures_of_different_projections_are_never_compared() -> None:
    other = CODE.model_copy(update={"projection": "another-projection"})
    with pytest.raises(ValueError, match="projections"):
        signature_distance(CODE, other)
    pool, _ = served(DraftPool(target_revision="r1"), "v1", 1.0, other)
    pool, _ = served(pool, "v2", 2.0, PROSE)
    assert [v for v, _ in nearest(pool, NEAR_CODE)] == ["v2"]


MANIFEST = {"kind": "candidate", "run_id": "r1", "created_at": "2026-12-05T10:00:00+00:00",
            "target_revision": "rev-1", "files": {"model.safetensors": {"sha256": "a" * 64, "bytes": 3}}}


def test_a_manifest_carries_the_signature_and_one_without_it_still_parses() -> None:
    old = Manifest.model_validate_json(json.dumps(MANIFEST))  # written before signatures existed
    assert old.signature is None
    signed = Manifest.model_validate({**MANIFEST, "signature": CODE.model_dump(mode="json")})
    assert signed.signature == CODE
    assert Manifest.model_validate_json(manifest_json(signed)).signature == CODE
    with pytest.raises(ValidationError):
        Manifest.model_validate({**MANIFEST, "signature": {"mean": [1.0], "std": [0.0], "tokens": 1}})
