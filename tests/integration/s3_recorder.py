"""A recording S3 proxy on loopback: every request the operator (or a pod) sends reaches the real S3
server (moto) through it, and is kept as (method, bucket, key, list prefix, keys deleted, access key).

The storage tenancy tests read the record to show that no request, of any kind, touched another
tenant's bucket or prefix. Path-style addressing only (what the operator uses with an endpoint).
"""

from __future__ import annotations

import http.client
import re
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")


@dataclass(frozen=True)
class S3Request:
    method: str
    bucket: str
    key: str  # "" for bucket-level requests
    list_prefix: str | None  # ListObjects' prefix (None when not a listing)
    deleted_keys: tuple[str, ...]  # DeleteObjects' keys
    access_key: str

    def names(self) -> tuple[str, ...]:
        """Every object name or listed prefix this request reached ("": a listing of the whole bucket)."""
        listed = () if self.list_prefix is None else (self.list_prefix,)
        return (*((self.key,) if self.key else ()), *listed, *self.deleted_keys)


def parse_request(method: str, target: str, headers: dict[str, str], body: bytes) -> S3Request:
    parts = urlsplit(target)
    bucket, _, key = unquote(parts.path).lstrip("/").partition("/")
    query = parse_qs(parts.query, keep_blank_values=True)
    # A GET on the bucket with list-type or a prefix is a listing; without a prefix it lists everything ("").
    is_listing = method == "GET" and not key and ("list-type" in query or "prefix" in query)
    listing = query.get("prefix", [""])[0] if is_listing else None
    deleted: tuple[str, ...] = ()
    if method == "POST" and "delete" in query and body:
        root = ET.fromstring(body)
        deleted = tuple(el.text or "" for el in root.iter() if el.tag.endswith("Key"))
    found = _CREDENTIAL.search(headers.get("authorization", ""))
    return S3Request(method, bucket, key, listing, deleted, found.group(1) if found else "")


class S3Recorder:
    """``with S3Recorder(upstream) as proxy:`` then point clients at ``proxy.url``."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.requests: list[S3Request] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="s3-recorder")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> S3Recorder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def snapshot(self) -> list[S3Request]:
        with self._lock:
            return list(self.requests)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        recorder = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:  # quiet: the record is the log
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with recorder._lock:
                    recorder.requests.append(parse_request(self.command, self.path, headers, body))
                upstream = http.client.HTTPConnection(*recorder.upstream, timeout=30)
                try:
                    upstream.request(self.command, self.path, body=body,
                                     headers={k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP})
                    answer = upstream.getresponse()
                    payload = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in _HOP_BY_HOP | {"content-length"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload) if self.command != "HEAD" else
                                                       answer.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Forward
