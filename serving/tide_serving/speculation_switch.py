"""The pod-local speculation switch file shared by the control route and the scheduler (no vLLM import).

Content "1" (on) or "0" (off); a missing or unreadable file means speculation as launched (on).
Written atomically (temp file + rename) so the scheduler never reads half a file.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_switch(path: Path, enabled: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text("1\n" if enabled else "0\n")
    tmp.replace(path)


def read_switch(path: Path) -> bool:
    try:
        return path.read_text().strip() != "0"
    except OSError:
        return True
