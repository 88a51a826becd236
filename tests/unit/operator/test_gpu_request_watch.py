"""The watch of GPUs held by scheduled pods (gpu_request_watch.py): pure bookkeeping, then the list/watch loop
against a scripted API (the real apiserver: tests/integration/test_operator.py, bench/scale_bench.py)."""

from __future__ import annotations

import json
import threading
import time

from kubernetes.client.exceptions import ApiException

from tide_operator.adapters.gpu_request_watch import SCHEDULED, GpuRequestWatch, HeldGpus


def pod(name: str, node: str | None = "gpu-a", gpus: int = 1, phase: str = "Running", uid: str | None = None,
        rv: str = "1") -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"metadata": {"name": name, "namespace": "other", "uid": uid or f"uid-{name}", "resourceVersion": rv},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def held(by_node) -> dict[str, list[str]]:
    return {node: sorted(r.name for r in requests) for node, requests in (by_node or {}).items()}


def test_each_event_keeps_only_what_a_scheduled_unfinished_gpu_pod_holds() -> None:
    gpus = HeldGpus()
    gpus.replace([pod("a"), pod("b", node="gpu-b", gpus=2), pod("cpu", gpus=0)])
    assert held(gpus.by_node()) == {"gpu-a": ["a"], "gpu-b": ["b"]}
    gpus.apply("MODIFIED", pod("a", phase="Succeeded"))  # finished: its GPUs are free
    gpus.apply("ADDED", pod("c", node="gpu-b"))
    gpus.apply("DELETED", pod("b", node="gpu-b", gpus=2))
    assert held(gpus.by_node()) == {"gpu-b": ["c"]}
    gpus.replace([pod("d")])  # a fresh list is the whole truth
    assert held(gpus.by_node()) == {"gpu-a": ["d"]}


class Listed:
    def __init__(self, body: dict) -> None:
        self.data = json.dumps(body).encode()


class Stream:
    """A watch response: its events, then (last=True) it stays open until closed, like a live watch."""

    def __init__(self, events: list[dict], last: bool = False) -> None:
        self.lines = [json.dumps(e).encode() + b"\n" for e in events]
        self.last = last
        self.closed = threading.Event()

    def stream(self, amt: int, decode_content: bool):
        for line in self.lines:
            yield line[:5]  # a chunk boundary inside a line
            yield line[5:]
        if self.last:
            self.closed.wait(10)
            raise ValueError("I/O operation on closed file")

    def close(self) -> None:
        self.closed.set()

    def release_conn(self) -> None:
        pass


class ScriptedPods:
    """list_pod_for_all_namespaces answering from a script; records what it was asked."""

    def __init__(self, script: list) -> None:
        self.script = script
        self.calls: list[dict] = []

    def list_pod_for_all_namespaces(self, **kwargs):
        self.calls.append(kwargs)
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def run_watch(script: list, until, monkeypatch) -> tuple[GpuRequestWatch, ScriptedPods]:
    pods = ScriptedPods(script)
    monkeypatch.setattr("tide_operator.adapters.gpu_request_watch.client.CoreV1Api", lambda api: pods)
    watch = GpuRequestWatch(lambda: None, page_size=2, retry_s=0.01)
    watch.start()
    deadline = time.monotonic() + 10
    while not until(watch) and time.monotonic() < deadline:
        time.sleep(0.01)
    watch.stop()
    return watch, pods


def test_lists_in_pages_then_follows_the_watch_from_the_lists_version(monkeypatch) -> None:
    script = [
        Listed({"metadata": {"continue": "next", "resourceVersion": "10"}, "items": [pod("a"), pod("b")]}),
        Listed({"metadata": {"resourceVersion": "10"}, "items": [pod("c", node="gpu-b")]}),
        Stream([{"type": "DELETED", "object": pod("a", rv="11")},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),
        Stream([{"type": "ADDED", "object": pod("d", node="gpu-b", rv="16")}], last=True),
    ]
    watch, pods = run_watch(script, lambda w: held(w.by_node()).get("gpu-b") == ["c", "d"], monkeypatch)
    assert held(watch.by_node()) == {"gpu-a": ["b"], "gpu-b": ["c", "d"]}
    assert all(call["field_selector"] == SCHEDULED for call in pods.calls)  # Pending pods never come
    assert [c.get("_continue") for c in pods.calls[:2]] == [None, "next"]
    # The first watch starts at the list's version, the next one after the bookmark's.
    assert [(c["watch"], c["resource_version"]) for c in pods.calls[2:]] == [(True, "10"), (True, "15")]


def test_an_expired_version_lists_again_and_a_failure_retries(monkeypatch) -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    script = [
        ApiException(status=503, reason="apiserver starting"),
        Listed({"metadata": {"resourceVersion": "10"}, "items": [pod("a")]}),
        Stream([gone]),
        Listed({"metadata": {"resourceVersion": "30"}, "items": [pod("b")]}),  # a was deleted meanwhile
        Stream([], last=True),
    ]
    states = []

    def relisted(w: GpuRequestWatch) -> bool:
        states.append(held(w.by_node()) if w.by_node() is not None else None)
        return w.by_node() is not None and held(w.by_node()) == {"gpu-a": ["b"]}

    watch, pods = run_watch(script, relisted, monkeypatch)
    assert held(watch.by_node()) == {"gpu-a": ["b"]}
    assert states[0] is None  # nothing known before the first list: passes list pods themselves
    assert [c.get("resource_version") for c in pods.calls if c.get("watch")] == ["10", "30"]


def test_a_watch_that_dies_of_an_unexpected_error_stops_answering(monkeypatch) -> None:
    class Broken(Stream):
        def stream(self, amt: int, decode_content: bool):
            raise RuntimeError("a bug")

    monkeypatch.setattr("threading.excepthook", lambda args: None)  # the thread's traceback is the log's
    script = [Listed({"metadata": {"resourceVersion": "10"}, "items": [pod("a")]}), Broken([])]
    watch, _ = run_watch(script, lambda w: w._thread is not None and not w._thread.is_alive(), monkeypatch)
    assert watch.by_node() is None  # stale numbers are not served: passes list pods again
