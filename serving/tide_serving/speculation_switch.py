"""The pod-local speculation switch file shared by the control route and the scheduler (no vLLM import).

Content: "1" (on, the launch table), "0" (off), or "1 <json bands>" (on, with speculative tokens per
batch-size band, [[first, last, K], ...]); a missing or unreadable file means speculation as
launched. Written atomically (temp file + rename) so the scheduler never reads half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

Band = tuple[int, int, int]


def write_switch(path: Path, enabled: bool, bands: list[Band] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    content = "0" if not enabled else "1" if bands is None else "1 " + json.dumps([list(b) for b in bands])
    tmp.write_text(content + "\n")
    tmp.replace(path)


def read_switch(path: Path) -> bool:
    return read_switch_state(path)[0]


def read_switch_state(path: Path) -> tuple[bool, list[Band] | None]:
    """(enabled, bands or None for the launch table); a file that cannot be read is "as launched"."""
    try:
        raw = path.read_text().strip()
    except OSError:
        return True, None
    flag, _, table = raw.partition(" ")
    if flag == "0":
        return False, None
    try:
        bands = [(int(a), int(b), int(k)) for a, b, k in json.loads(table)] if table else None
    except (ValueError, TypeError):
        bands = None  # a damaged table: the launch one, never a crash in the scheduler
    return True, bands
