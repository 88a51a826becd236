"""Does a live object already match what we would build? (pure; drives zero-write no-op passes)

The API server adds defaults (imagePullPolicy, clusterIP, terminationMessagePath, ...), so a live
object matches when every field we build is present with the same value; fields we do not set
are left to the server and to other controllers (an autoscaler on replicas, for instance).
"""

from __future__ import annotations

from typing import Any


def _scalar_equal(desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    # Quantities round-trip as strings ("4" for 4); booleans never equal numbers.
    scalars = (int, float, str)
    if isinstance(desired, bool) or isinstance(live, bool):
        return False
    return isinstance(desired, scalars) and isinstance(live, scalars) and str(desired) == str(live)


def differences(desired: Any, live: Any, path: str = "") -> list[str]:
    """Paths where ``live`` does not contain ``desired`` (empty: nothing to patch)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [path or "."]
        out: list[str] = []
        for key, value in desired.items():
            out += differences(value, live.get(key), f"{path}.{key}")
        return out
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return [path]
        return [d for i, (want, have) in enumerate(zip(desired, live, strict=True))
                for d in differences(want, have, f"{path}[{i}]")]
    if desired is None:
        return []
    return [] if _scalar_equal(desired, live) else [path]
