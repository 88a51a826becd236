"""Durations and byte quantities as Kubernetes APIs write them, parsed to integers.

The spec holds strings (``"30s"``, ``"2Gi"``) like every Kubernetes API; the control loop reads
integers through these helpers so no caller parses units twice.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

# Go duration subset that CEL's duration() and humans both read: "90s", "5m", "1h30m".
DURATION_PATTERN = r"^([0-9]{1,5}h)?([0-9]{1,5}m)?([0-9]{1,5}s)?$"
# Binary and decimal suffixes of resource.Quantity, integers only (no "1.5Gi": no floats in spec).
BYTES_PATTERN = r"^[0-9]{1,15}(Ki|Mi|Gi|Ti|k|M|G|T)?$"

Duration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN, min_length=2, max_length=20)]
ByteQuantity = Annotated[str, StringConstraints(pattern=BYTES_PATTERN, min_length=1, max_length=20)]

_DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_BYTES_RE = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_BYTE_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def duration_seconds(text: str) -> int:
    """``"1h30m"`` -> 5400. Raises ValueError on anything else (empty, floats, days)."""
    match = _DURATION_RE.match(text)
    if not text or match is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 5m or 1h30m")
    hours, minutes, seconds = (int(group or 0) for group in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def quantity_bytes(text: str) -> int:
    """``"2Gi"`` -> 2147483648. Raises ValueError on anything else."""
    match = _BYTES_RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a byte quantity like 512Mi or 2Gi")
    return int(match.group(1)) * _BYTE_FACTORS[match.group(2)]
