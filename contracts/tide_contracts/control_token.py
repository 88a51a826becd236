"""Where a serving pod finds the bearer tokens its control routes accept (serving contract, version 1).

The operator keeps one Secret per TideDeployment with the key ``token`` and, for a while after a
rotation, ``previous-token``. Pods mount it as a volume and name the file in TIDE_CONTROL_TOKEN_FILE;
the kubelet swaps a Secret volume's files atomically when the Secret changes, so a pod re-reads the
file on change instead of restarting. ``previous-token`` beside it is accepted too: the operator
switches to the new token at once, while kubelets deliver it a minute or two later.

TIDE_CONTROL_TOKEN (the token itself in the environment) is still read when no file is named; it
cannot be rotated without a restart. Standard library only: the simulator imports it too.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

CONTROL_TOKEN_FILE_ENV = "TIDE_CONTROL_TOKEN_FILE"  # noqa: S105 - a variable name, not a secret
CONTROL_TOKEN_ENV = "TIDE_CONTROL_TOKEN"  # noqa: S105 - a variable name, not a secret
TOKEN_KEY = "token"  # noqa: S105 - a Secret key name
PREVIOUS_TOKEN_KEY = "previous-token"  # noqa: S105 - a Secret key name
MOUNT_DIR = "/var/run/tide/control"  # where the operator mounts the Secret in serving pods
_Stamp = tuple[tuple[int, int, int], ...]


class ControlTokens:
    """The tokens a pod accepts now, re-read whenever the mounted files change (stat, not a timer)."""

    def __init__(self, token_file: Path | None, fixed_token: str = "") -> None:
        self.token_file = token_file
        self._fixed = fixed_token
        self._lock = threading.Lock()
        self._stamp: _Stamp | None = None
        self._tokens: tuple[str, ...] = ()

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None) -> ControlTokens:
        env = os.environ if environ is None else environ
        file = env.get(CONTROL_TOKEN_FILE_ENV, "")
        return cls(Path(file) if file else None, env.get(CONTROL_TOKEN_ENV, ""))

    @property
    def configured(self) -> bool:
        return bool(self.accepted())

    def accepted(self) -> tuple[str, ...]:
        """The current token first, then the previous one during a rotation; () when none is set."""
        if self.token_file is None:
            return (self._fixed,) if self._fixed else ()
        files = (self.token_file, self.token_file.with_name(PREVIOUS_TOKEN_KEY))
        stamp = tuple(_stat(f) for f in files)
        with self._lock:
            if stamp != self._stamp:
                self._tokens = tuple(t for t in map(_read, files) if t)
                self._stamp = stamp
            return self._tokens


def _stat(path: Path) -> tuple[int, int, int]:
    # The kubelet replaces the files through a symlink swap: the inode changes even when mtime would not.
    try:
        st = path.stat()
    except OSError:
        return (0, 0, 0)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
