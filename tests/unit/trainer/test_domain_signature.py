"""The domain signature (issue 16): a fixed projection that every run of a target shares, streaming
statistics equal to the whole-matrix ones, no layer outweighing the others, and traffic told apart."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from tide_contracts.draft_pool import DomainSignature, signature_distance
from tide_trainer.signature import (
    PROJECTION,
    SIGNATURE_DIMENSIONS,
    SignatureAccumulator,
    domain_signature,
    projection_matrix,
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
