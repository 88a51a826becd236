"""The Lease adapter: read, create and replace the leader Lease; the loops that wait, renew, release.

Writes carry the resourceVersion just read (optimistic concurrency): a 409 means another process
wrote first, so this one does not lead (or no longer does). The decisions are control/leadership.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from tide_operator.control.leadership import (
    LeaseRecord,
    LeaseTimings,
    Verdict,
    decide,
    record_from_spec,
    released,
    renew_overdue,
    spec_from_record,
)

log = logging.getLogger(__name__)
API_ERRORS = (ApiException, HTTPError, OSError)  # a failed attempt: retried until the renew deadline


def utcnow() -> datetime:
    return datetime.now(UTC)


class LeaseStore:
    """One Lease, read and written as plain JSON (MicroTime stays in its wire format)."""

    def __init__(self, api: client.ApiClient, namespace: str, name: str, timeout_s: float) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace, self.name, self.timeout_s = namespace, name, timeout_s

    def read(self) -> tuple[LeaseRecord | None, str | None]:
        """The record and its resourceVersion; (None, None) when there is no Lease."""
        try:
            response = self.coordination.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self.timeout_s)
        except ApiException as e:
            if e.status == 404:
                return None, None
            raise
        lease = json.loads(response.data)
        return record_from_spec(lease.get("spec")), lease["metadata"]["resourceVersion"]

    def write(self, record: LeaseRecord, resource_version: str | None) -> str | None:
        """Create (no resourceVersion) or replace; the new resourceVersion, None when another
        process wrote first."""
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": spec_from_record(record)}
        try:
            if resource_version is None:
                response = self.coordination.create_namespaced_lease(
                    self.namespace, body, _preload_content=False, _request_timeout=self.timeout_s)
            else:
                response = self.coordination.replace_namespaced_lease(
                    self.name, self.namespace, body, _preload_content=False, _request_timeout=self.timeout_s)
        except ApiException as e:
            if e.status == 409:
                return None
            raise
        return str(json.loads(response.data)["metadata"]["resourceVersion"])


class LeaderElector:
    """This process's side of the election: ``acquire`` before Kopf starts, ``hold`` while it runs."""

    def __init__(self, store: LeaseStore, identity: str, timings: LeaseTimings,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.store, self.identity, self.timings, self.clock = store, identity, timings, clock
        self.last_renewed: datetime | None = None  # set while leading
        self._seen: tuple[str | None, datetime] | None = None  # (resourceVersion, first seen at)
        self._record: LeaseRecord | None = None
        self._resource_version: str | None = None
        # step() runs in a worker thread that cancelling ``hold`` cannot stop: release waits for it.
        self._lock = threading.Lock()

    @property
    def leading(self) -> bool:
        return self.last_renewed is not None

    def step(self) -> Verdict:
        """One read, one decision, at most one write. LOST also when reads fail past the deadline."""
        with self._lock:
            return self._step()

    def _step(self) -> Verdict:
        now = self.clock()
        try:
            self._record, self._resource_version = self.store.read()
        except API_ERRORS as e:
            log.warning("Reading the leader Lease failed: %s", e)
            return self._overdue(now)
        if self._seen is None or self._seen[0] != self._resource_version:
            self._seen = (self._resource_version, now)
        decision = decide(self._record, self.identity, now, self._seen[1], self.timings, self.last_renewed)
        if decision.write is None:
            return decision.verdict
        try:
            written = self.store.write(decision.write, self._resource_version)
        except API_ERRORS as e:
            log.warning("Writing the leader Lease failed: %s", e)
            return self._overdue(now)
        if written is None:  # someone else wrote between our read and write
            return Verdict.LOST if self.leading else Verdict.WAIT
        self.last_renewed, self._record, self._resource_version = now, decision.write, written
        return decision.verdict

    def _overdue(self, now: datetime) -> Verdict:
        if renew_overdue(self.last_renewed, now, self.timings):
            return Verdict.LOST
        return Verdict.RENEW if self.leading else Verdict.WAIT

    async def acquire(self) -> None:
        """Return once this process leads; until then only look at the lease every retry period."""
        while True:
            verdict = await asyncio.to_thread(self.step)
            if verdict is Verdict.ACQUIRE:
                log.info("Leader election: %s acquired lease %s/%s", self.identity, self.store.namespace,
                         self.store.name)
                return
            await asyncio.sleep(self.timings.retry_s)

    async def hold(self, on_lost: Callable[[], None]) -> None:
        """Renew every retry period; call ``on_lost`` (which should exit the process) when leadership ends."""
        while True:
            await asyncio.sleep(self.timings.retry_s)
            if await asyncio.to_thread(self.step) is Verdict.LOST:
                self.last_renewed = None
                on_lost()
                return

    def release(self) -> None:
        """Hand the lease over at once (client-go's ReleaseOnCancel); only after Kopf has stopped."""
        with self._lock:
            self._release()

    def _release(self) -> None:
        if not self.leading or self._record is None:
            return
        try:
            done = self.store.write(released(self._record, self.clock()), self._resource_version) is not None
        except API_ERRORS as e:
            log.warning("Releasing the leader Lease failed (a follower takes over when it expires): %s", e)
            return
        self.last_renewed = None
        log.info("Leader election: %s released lease %s/%s%s", self.identity, self.store.namespace,
                 self.store.name, "" if done else " (already taken over)")


async def wait_for_leadership(elector: LeaderElector, liveness_url: str) -> bool:
    """Wait as a follower until this process leads (True) or SIGTERM/SIGINT comes (False).

    Kopf's liveness endpoint starts only with Kopf, so meanwhile ``liveness_url`` answers 200 here:
    the kubelet must not restart a healthy follower. The port is free again when this returns.
    """
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    runner = await _serve_liveness(liveness_url)
    acquiring = asyncio.create_task(elector.acquire())
    stopping = asyncio.create_task(stopped.wait())
    try:
        await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (acquiring, stopping):
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await runner.cleanup()
    return not stopped.is_set() and elector.leading


async def _serve_liveness(liveness_url: str) -> web.AppRunner:
    url = urlsplit(liveness_url)

    async def alive(_: web.Request) -> web.Response:
        return web.json_response({"leader": False, "waiting": "leader election"})

    app = web.Application()
    app.router.add_get(url.path or "/", alive)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, url.hostname, url.port or 80).start()
    return runner
