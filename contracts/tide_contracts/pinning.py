"""Where a serving pod may read drafts from and write captures to (serving contract, version 1).

A holder of a pod's control token must not turn the pod into a reader of another tenant's drafts or
a writer into another tenant's prefix. So the control routes accept:
- draft sources under the registry prefix the pod was started with (TIDE_REGISTRY_URI: its
  `drafts/` and `candidates/`), or exactly the pod's launch draft as `--speculative-config` names it
  (a rollback to a launch draft on the hub, in another bucket or in the image keeps working);
- capture destinations under that registry prefix or the pod's TIDE_CAPTURE_URI;
- pod-local draft directories only under TIDE_LOCAL_DRAFTS_DIR, when set (tests, drafts baked into
  an image); the operator never sets it and its pod policy refuses TIDE_* variables in overrides.
Anything else is refused with 403 `forbidden`. Pure functions; standard library only.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

LOCAL_DRAFTS_DIR_ENV = "TIDE_LOCAL_DRAFTS_DIR"


def normalized(uri: str) -> str:
    return uri.rstrip("/")


def under_prefix(uri: str, prefix: str) -> bool:
    """``uri`` is ``prefix`` or below it (both s3:// or both absolute paths), with no segment that could
    climb out (``..``, ``.``, empty)."""
    uri, prefix = normalized(uri), normalized(prefix)
    remote = prefix.startswith("s3://")
    if remote != uri.startswith("s3://") or not (remote or (prefix.startswith("/") and uri.startswith("/"))):
        return False
    if uri != prefix and not uri.startswith(prefix + "/"):
        return False
    path = uri[len("s3://"):] if remote else uri[1:]
    return all(segment not in ("", ".", "..") for segment in path.split("/")) and (remote or posixpath.normpath(
        uri) == uri)


def draft_source_refusal(source: str, registry_uri: str | None, launch_sources: Iterable[str],
                         local_drafts_dir: str | None = None) -> str | None:
    """None when the pod may load from ``source``, else why not."""
    if normalized(source) in {normalized(s) for s in launch_sources if s}:
        return None
    for root in (registry_uri, local_drafts_dir):
        if root and under_prefix(source, root) and normalized(source) != normalized(root):
            return None
    where = f"under {normalized(registry_uri)}/" if registry_uri else "from a registry (TIDE_REGISTRY_URI is unset)"
    return f"draft source {source!r} refused: this pod loads drafts only {where} or its launch draft"


def capture_destination_refusal(destination: str, registry_uri: str | None, capture_uri: str | None) -> str | None:
    """None when the pod may write captures under ``destination``, else why not."""
    allowed = [p for p in (registry_uri, capture_uri) if p]
    if any(under_prefix(destination, p) for p in allowed):
        return None
    where = " or ".join(f"{normalized(p)}/" for p in allowed) or "nowhere (no TIDE_REGISTRY_URI or TIDE_CAPTURE_URI)"
    return f"capture destination {destination!r} refused: this pod writes captures only under {where}"
