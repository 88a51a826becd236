"""One boto3 S3 client per endpoint, region and credential set, reused across passes and deployments.

A client is a connection pool: building one per pass cost every deployment a new TLS handshake per
interval (and the client's construction, tens of milliseconds). boto3 clients are thread-safe; their
construction from the default session is not, so it happens under a lock. A client is kept under the
access key id and a SHA-256 of the secret key, never the secret itself: a rotated key is another set,
so another client, and the old one ages out. Bounded: the least recently used client goes first.

A 401 or 403 to a client's request calls ``on_refused`` with its access key id: the referenced
Secrets holding that key are read again at the next pass (secret_cache.py), so a rotated key is
picked up without a watch on Secrets.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from tide_operator.adapters.secret_cache import SECRETS

MAX_CLIENTS = 64  # credential sets in use at once: about one per tenant namespace
Slot = tuple[str | None, str, str | None, str]  # endpoint, region, access key id, sha256(secret key)


class S3ClientCache:
    def __init__(self, max_clients: int = MAX_CLIENTS, factory: Callable[..., Any] = boto3.client,
                 on_refused: Callable[[Iterable[str]], Any] | None = None) -> None:
        self.max_clients, self._factory, self._on_refused = max_clients, factory, on_refused
        self._clients: OrderedDict[Slot, Any] = OrderedDict()
        self._lock = threading.Lock()

    def client(self, endpoint: str | None, region: str, credentials: Mapping[str, str]) -> Any:
        """The client for this endpoint and credential set (empty: the operator's own identity)."""
        key_id, secret = credentials.get("AWS_ACCESS_KEY_ID"), credentials.get("AWS_SECRET_ACCESS_KEY")
        slot = (endpoint, region, key_id, hashlib.sha256(secret.encode()).hexdigest() if secret else "")
        with self._lock:
            made = self._clients.get(slot)
            if made is None:
                made = self._clients[slot] = self._factory(
                    "s3", endpoint_url=endpoint, region_name=region, aws_access_key_id=key_id,
                    aws_secret_access_key=secret,
                    config=BotoConfig(s3={"addressing_style": "path"} if endpoint else {}, connect_timeout=5,
                                      read_timeout=30, retries={"max_attempts": 2}))
                if key_id and self._on_refused is not None:
                    made.meta.events.register("after-call.s3", _refusal_hook(key_id, self._on_refused))
                while len(self._clients) > self.max_clients:
                    self._clients.popitem(last=False)  # not closed: a pass may still hold it
            self._clients.move_to_end(slot)
            return made

    def slots(self) -> Iterator[Slot]:
        return iter(list(self._clients))

    def clear(self) -> None:
        with self._lock:
            self._clients.clear()

    def __len__(self) -> int:
        return len(self._clients)


def _refusal_hook(key_id: str, on_refused: Callable[[Iterable[str]], Any]) -> Callable[..., None]:
    """botocore's after-call event (every S3 operation): report the key when the answer refuses it."""
    def after_call(http_response: Any = None, **_: Any) -> None:
        if getattr(http_response, "status_code", None) in (401, 403):
            on_refused((key_id,))
    return after_call


CLIENTS = S3ClientCache(on_refused=SECRETS.forget_holding)
