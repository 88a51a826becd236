from __future__ import annotations

import pytest

from tide_operator.api.units import duration_seconds, quantity_bytes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("1h30m", 5400), ("2m5s", 125), ("0s", 0), ("90m", 5400)],
)
def test_duration_seconds(text: str, seconds: int) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "1.5m", "1d", "5m1h", "-5s", "30 s", "PT30S"])
def test_duration_seconds_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        duration_seconds(text)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("2Gi", 2 * 1024**3),
        ("512Mi", 512 * 1024**2),
        ("1k", 1000),
        ("3G", 3 * 10**9),
        ("4096", 4096),
        ("1Ti", 1024**4),
    ],
)
def test_quantity_bytes(text: str, count: int) -> None:
    assert quantity_bytes(text) == count


@pytest.mark.parametrize("text", ["", "1.5Gi", "2GB", "Gi", "-1Mi", "2 Gi"])
def test_quantity_bytes_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="byte quantity"):
        quantity_bytes(text)
