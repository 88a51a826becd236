"""Every condition and Event message passes here: credentials out, length bounded (pure).

Messages quote errors from Prometheus, S3 and the Kubernetes API, and those quote URLs (with
their userinfo), request headers and whole response bodies. A status holds conditions of at most
32 KiB each and the API server refuses the whole status write when one is longer, so a message is
cut here, well below that, with a marker saying how much was left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MESSAGE_LIMIT = 1024
"""Characters of a condition or Event message (the marker included)."""
REDACTED = "***"

# scheme://user:password@host -> scheme://***@host (the userinfo of any URL in the text)
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s'\"]+@")
# Authorization: Bearer x / 'Authorization': 'Basic x' / authorization=x (headers, dict reprs, logs)
_AUTHORIZATION = re.compile(
    r"(?P<key>(?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)(?:(?P<scheme>bearer|basic)\s+)?[^\s'\",}]+",
    re.IGNORECASE)
# A bare "Bearer <token>" or "Basic <base64>" anywhere else; a lowercase word is prose ("basic
# authentication"), so the credential must hold a digit, a capital or a symbol.
_SCHEME_CREDENTIAL = re.compile(
    r"\b(?P<scheme>[Bb]earer|[Bb]asic|BEARER|BASIC)\s+(?=[a-z]*[^a-z\s])[A-Za-z0-9._~+/=-]{8,}")
# ?access_token=x&password=y in query strings
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:access_token|token|password|passwd|api_key|apikey)=)[^&\s'\"#]+",
                           re.IGNORECASE)


def _authorization(match: re.Match[str]) -> str:
    scheme = match.group("scheme")
    return match.group("key") + (f"{scheme} " if scheme else "") + REDACTED


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without URL userinfo, Authorization values, token query parameters and ``secrets``."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    text = _AUTHORIZATION.sub(_authorization, text)
    text = _SCHEME_CREDENTIAL.sub(lambda m: f"{m.group('scheme')} {REDACTED}", text)
    return _QUERY_SECRET.sub(lambda m: m.group("key") + REDACTED, text)


def truncate(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, ending in a marker that says how many were cut."""
    if len(text) <= limit:
        return text
    marker = f" ...[{len(text)} chars, truncated]"
    return text[: max(0, limit - len(marker))] + marker


def bounded_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """What a condition or Event may carry: redacted first (a cut must not leave half a password)."""
    return truncate(redact(text), limit)
