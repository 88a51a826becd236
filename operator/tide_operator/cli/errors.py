"""One-line errors for the CLI: what the API server said, in words, never a traceback."""

from __future__ import annotations

import json
from typing import Any


def _server_message(err: Any) -> str:
    """The Status object's message (a schema or CEL rule names the field there), else the reason."""
    try:
        body = json.loads(err.body or "{}")
    except (TypeError, ValueError):
        body = {}
    return str(body.get("message") or err.reason or "").strip()


def api_error(err: Any, namespace: str, name: str | None) -> str:
    """An ApiException as one line: not found, forbidden (with the verb the user lacks), invalid, other."""
    what = f"TideDeployment {namespace}/{name}" if name else f"TideDeployments in {namespace}"
    status = getattr(err, "status", None)
    if status == 404:
        return f"tide: {what} not found"
    if status in (401, 403):
        return f"tide: not allowed: {_server_message(err)}"
    if status == 422:
        return f"tide: the API server rejected the change: {_server_message(err)}"
    if status == 409:
        return f"tide: {what} changed while this ran; run it again ({_server_message(err)})"
    return f"tide: the API server answered {status}: {_server_message(err)}"


def unreachable(api: Any, err: Exception) -> str:
    host = getattr(getattr(api, "configuration", None), "host", None) or "the API server"
    reason = getattr(err, "reason", None) or err
    return f"tide: cannot reach the Kubernetes API server at {host}: {reason}"
