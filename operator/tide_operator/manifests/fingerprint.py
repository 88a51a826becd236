"""A stable hash of a built object, for drift detection.

The hash is stored on the child (annotation ``tide.dev/spec-hash``); a later pass compares the
hash of what it would build now with the stored one and with what the cluster shows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

SPEC_HASH_ANNOTATION = "tide.dev/spec-hash"


def stable_hash(obj: Any) -> str:
    """sha256 (hex, 16 characters) of the canonical JSON of ``obj``: key order does not matter."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
