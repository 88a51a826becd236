"""The GPUs that scheduled pods of every namespace hold, per node: a watch of its own, filtered by the apiserver.

Placement needs what other pods hold on each node. Kopf keeps one watch per resource, and the operator's
watch on pods carries a server-side label selector (its own pods only, handlers.configure), so the rest
of the cluster is watched here, and only pods bound to a node and not finished (`SCHEDULED`): a busy
cluster's Pending pods (an autoscaler's backlog can be thousands) stay on the apiserver instead of
passing through the operator's memory. Per pod only a small GpuRequest is kept, and only for pods that
request GPUs (watch_cache.gpu_request).

One daemon thread: list (in pages) then watch from the list's resourceVersion, with bookmarks. A 410 Gone
(the resourceVersion fell out of etcd's window) lists again at once; any other failure waits `retry_s` and
lists again. Until the first list completed, `by_node()` is None and a pass lists pods itself
(Cluster.node_inventory), as it does outside Kopf.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from tide_operator.adapters.watch_cache import GpuRequest, gpu_request

log = logging.getLogger(__name__)

# Bound to a node and not finished: a field selector pods support (a finished pod leaves the watch as DELETED).
SCHEDULED = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
HTTP_GONE = 410


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class HeldGpus:
    """Pure: the GPU requests of the pods seen so far, by pod UID, updated one watch event at a time."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[str, GpuRequest]] = {}  # uid -> (node, request)

    def replace(self, pods: list[Mapping[str, Any]]) -> None:
        """A fresh list: what it holds is the whole truth (pods deleted while unwatched are gone)."""
        self._held = {}
        for pod in pods:
            self.apply("ADDED", pod)

    def apply(self, kind: str, pod: Mapping[str, Any]) -> None:
        uid = pod["metadata"].get("uid") or f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        held = gpu_request(pod) if kind in ("ADDED", "MODIFIED") else None
        if held:
            ((node, request),) = held.items()
            self._held[uid] = (node, request)
        else:
            self._held.pop(uid, None)

    def by_node(self) -> dict[str, list[GpuRequest]]:
        nodes: dict[str, list[GpuRequest]] = {}
        for node, request in self._held.values():
            nodes.setdefault(node, []).append(request)
        return nodes


class GpuRequestWatch:
    """`HeldGpus` kept current by a list and a watch of scheduled pods in every namespace (thread-safe)."""

    def __init__(self, api: Callable[[], client.ApiClient], *, page_size: int = 500, watch_timeout_s: int = 300,
                 retry_s: float = 5.0, connect_timeout_s: float = 10.0) -> None:
        self._api = api
        self._page_size = page_size
        self._watch_timeout_s = watch_timeout_s
        self._retry_s = retry_s
        self._connect_timeout_s = connect_timeout_s
        self._held = HeldGpus()
        self._synced = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Once Kopf has logged in (the default client configuration is loaded then); idempotent."""
        with self._lock:  # handlers call it from several worker threads
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpu-request-watch", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if (response := self._response) is not None:
            response.close()  # unblocks the read of the open watch
        if self._thread is not None:
            self._thread.join(timeout=5)

    def by_node(self) -> dict[str, list[GpuRequest]] | None:
        """GPU requests by node; None until the first list completed."""
        with self._lock:
            return self._held.by_node() if self._synced else None

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:
            if self._stopped.is_set():  # stop() closing the stream under a read raises whatever it raises
                return
            with self._lock:
                self._synced = False  # a dead watch goes stale: passes list pods themselves again
            raise

    def _follow(self) -> None:
        while not self._stopped.is_set():
            try:
                core = client.CoreV1Api(self._api())  # per listing: the current credentials
                version = self._list(core)
                while not self._stopped.is_set():
                    version = self._watch(core, version)
            except Gone:
                log.info("GPU request watch: resourceVersion expired, listing again")
            except (ApiException, HTTPError, OSError, ValueError, KeyError) as err:
                if self._stopped.is_set():
                    return
                log.warning("GPU request watch failed (%s); listing again in %.0f s", err, self._retry_s)
                self._stopped.wait(self._retry_s)

    def _list(self, core: client.CoreV1Api) -> str:
        pods: list[Mapping[str, Any]] = []
        token = None
        while True:
            page = self._page(core, limit=self._page_size, **({"_continue": token} if token else {}))
            pods.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
        with self._lock:
            self._held.replace(pods)
            self._synced = True
        return str(meta["resourceVersion"])

    def _watch(self, core: client.CoreV1Api, version: str) -> str:
        """Follows one watch request until the server closes it; returns the last resourceVersion seen."""
        response = core.list_pod_for_all_namespaces(
            field_selector=SCHEDULED, watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s, _preload_content=False,
            _request_timeout=(self._connect_timeout_s, self._watch_timeout_s + 30))
        self._response = response
        try:
            for event in _events(response):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == HTTP_GONE:
                        raise Gone()
                    raise ApiException(status=obj.get("code"), reason=f"{obj.get('reason')}: {obj.get('message')}")
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event.get("type") != "BOOKMARK":
                    with self._lock:
                        self._held.apply(event["type"], obj)
        finally:
            self._response = None
            response.close()
            response.release_conn()
        return version

    @staticmethod
    def _page(core: client.CoreV1Api, **kwargs: Any) -> dict[str, Any]:
        try:
            response = core.list_pod_for_all_namespaces(field_selector=SCHEDULED, _preload_content=False, **kwargs)
        except ApiException as err:
            if err.status == HTTP_GONE:  # the continue token expired mid-list
                raise Gone() from err
            raise
        return dict(json.loads(response.data))


def _events(response: Any) -> Iterator[dict[str, Any]]:
    """One JSON object per line of the watch stream."""
    pending = b""
    for chunk in response.stream(amt=64 * 1024, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)
