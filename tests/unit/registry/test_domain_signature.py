"""The domain signature (issue 16): a fixed projection that every run of a target shares, streaming
statistics equal to the whole-matrix ones, no layer outweighing the others, and traffic told apart."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from tide_contracts.draft_pool import DomainSignature, signature_distance
from tide_contracts.signature import (
    PROJECTION,
    SIGNATURE_DIMENSIONS,
    SignatureAccumulator,
    domain_signature,
    merge_signatures,
    projection_matrix,
    signature_from_metadata,
    signature_to_metadata,
)

H = 8  # hidden size: rows are 3*H wide


def test_the_projection_is_the_contracts_sign_matrix() -> None:
    """Rebuilt from the recipe in docs/contracts/draft-registry.md, independently of the module."""
    width = 3 * H
    stream = hashlib.shake_256(f"tide-domain-signature/{PROJECTION}/{width}x16".encode()).digest(width * 2)
    signs = [1.0 if (byte >> (7 - bit)) & 1 else -1.0 for byte in stream for bit in range(8)]
    expected = np.array(signs).reshape(width, 16) / math.sqrt(width)
    np.testing.assert_array_equal(projection_matrix(width), expected)
    assert not np.array_equal(projection_matrix(width)[:, 0], projection_matrix(width + 3)[:width, 0])


def domain(rng: np.random.Generator, centre: float, rows: int) -> np.ndarray:
    """[rows, 3*H]: hidden states of one kind of traffic, the high layer much larger (as in real models)."""
    base = rng.normal(loc=centre, scale=1.0, size=(rows, 3, H))
    base[:, 2] *= 50.0
    return base.reshape(rows, 3 * H)


def signature_of(rows: np.ndarray) -> DomainSignature:
    signature = domain_signature([rows], H)
    assert signature is not None
    return signature


def test_streaming_statistics_equal_those_of_all_rows_at_once() -> None:
    rng = np.random.default_rng(0)
    blocks = [domain(rng, 0.5, n) for n in (1, 7, 30, 0, 12)]
    streamed = domain_signature(blocks, H)
    rows = np.concatenate(blocks).reshape(-1, 3, H)
    unit = rows / np.sqrt(np.mean(rows * rows, axis=-1, keepdims=True))
    projected = unit.reshape(len(rows), -1) @ projection_matrix(3 * H)
    assert streamed is not None
    assert streamed.tokens == 50
    assert len(streamed.mean) == SIGNATURE_DIMENSIONS
    assert streamed.projection == PROJECTION
    # float32 projection (as captured), float64 statistics
    np.testing.assert_allclose(streamed.mean, projected.mean(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(streamed.std, projected.std(axis=0), rtol=1e-5, atol=1e-5)


def test_no_layer_outweighs_the_others_by_its_norm() -> None:
    rows = domain(np.random.default_rng(1), 0.0, 40)
    louder = rows.reshape(-1, 3, H).copy()
    louder[:, 2] *= 1000.0
    first, second = signature_of(rows), signature_of(louder.reshape(40, -1))
    np.testing.assert_allclose(first.mean, second.mean, rtol=1e-5, atol=1e-5)


def test_the_same_traffic_is_nearer_than_other_traffic() -> None:
    rng = np.random.default_rng(2)
    code, code_again, prose = (signature_of(domain(rng, c, 200)) for c in (1.0, 1.0, -1.0))
    assert signature_distance(code, code_again) < 0.1 * signature_distance(code, prose)


def test_nothing_captured_gives_no_signature_and_one_token_a_valid_one() -> None:
    assert domain_signature([], H) is None
    assert domain_signature([np.zeros((0, 3 * H))], H) is None
    one = SignatureAccumulator(H)
    one.add(np.ones((1, 3 * H)))
    signature = one.signature()
    assert signature is not None
    assert signature.tokens == 1
    assert min(signature.std) > 0  # floored: a Gaussian, so distances stay finite


def test_rows_of_another_width_are_refused() -> None:
    with pytest.raises(ValueError):
        SignatureAccumulator(H).add(np.ones((4, 3 * H + 1)))


# ---- shards' signatures: merged exactly, carried in a capture object's metadata --------------------------------
def test_merged_shard_signatures_equal_the_signature_of_all_their_rows() -> None:
    rng = np.random.default_rng(3)
    blocks = [rng.standard_normal((n, 3 * H)) + shift for n, shift in ((40, 0.0), (7, 2.0), (90, -1.0))]
    parts = [domain_signature([block], H) for block in blocks]
    merged = merge_signatures(p for p in parts if p is not None)
    whole = domain_signature(blocks, H)
    assert merged is not None
    assert whole is not None
    assert merged.tokens == whole.tokens == 137
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(merged.std, whole.std, rtol=1e-9, atol=1e-12)
    assert merge_signatures([]) is None


def test_signatures_of_another_projection_are_not_merged() -> None:
    sig = domain_signature([np.ones((3, 3 * H))], H)
    assert sig is not None
    with pytest.raises(ValueError, match="cannot merge"):
        merge_signatures([sig, sig.model_copy(update={"projection": "other"})])


def test_a_signature_survives_capture_metadata_within_its_size() -> None:
    sig = domain_signature([np.random.default_rng(1).standard_normal((50, 3 * H)) * 1e3], H)
    assert sig is not None
    text = signature_to_metadata(sig)
    assert text.isascii()
    assert len(text) < 400  # S3 allows 2 KiB of user metadata in all
    back = signature_from_metadata(text)
    assert back is not None
    assert (back.tokens, back.projection) == (50, PROJECTION)
    np.testing.assert_allclose(back.mean, sig.mean, rtol=1e-5)
    np.testing.assert_allclose(back.std, sig.std, rtol=1e-5)


@pytest.mark.parametrize("text", [
    None, "", "garbage", "3;1,2;1", "3;1,2;1,0", "3;nan,1;1,1", "-1;1;1", "3;1;1;1", "3;" + "1," * 900 + "1;1",
])
def test_metadata_a_pod_wrote_wrong_is_no_signature(text: str | None) -> None:
    """Pods run the tenant's image: their metadata is parsed, bounded and validated, never trusted."""
    assert signature_from_metadata(text) is None
