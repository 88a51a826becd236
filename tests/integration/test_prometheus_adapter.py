"""The Prometheus adapter against real Prometheus scraping simulator processes on loopback.

No cluster: three simulators on 127.1.0.x, a file_sd targets file with the labels the process
kubelet writes, Debian's Prometheus scraping every second. The adapter's numbers must match the
acceptance each simulator was told to produce (scenario: draft version x traffic domain).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tide_contracts import serving_control as sc
from tide_localcluster.processes import ProcessRecord, is_alive, spawn, stop
from tide_localcluster.prometheus import PrometheusServer, start_prometheus
from tide_operator.adapters.prometheus_adapter import (
    AdapterConfig,
    PrometheusAdapter,
    PrometheusUnavailable,
    http_query,
)
from tide_operator.adapters.prometheus_adapter_metrics import observation
from tide_operator.adapters.prometheus_adapter_queries import DeploymentKey, Metric
from tide_vllm_sim.engine import expected_length
from tide_vllm_sim.load import LoadSpec, run_load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

G = 3
A = {"initial": {"general": 0.8, "korean": 0.3}, "v2": {"general": 0.8, "korean": 0.7}, "v3": {"korean": 0.5}}
TOKEN = "adapter-test"
SPEC = json.dumps({"method": "eagle3", "model": "draft", "num_speculative_tokens": G})
LLAMA, QWEN = DeploymentKey("team-a", "llama"), DeploymentKey("team-b", "qwen")
QWEN_BACKGROUND = 8  # virtual requests the qwen pod always runs (its batch size)
RPS, MAX_TOKENS = 15, 16
WINDOW_S = 6  # rate window: 6 scrapes


def _free_ports(host: str) -> tuple[int, int]:
    """The API and control ports of one simulator: bound together, so the OS cannot repeat one."""
    with socket.socket() as a, socket.socket() as b:
        a.bind((host, 0))
        b.bind((host, 0))
        return int(a.getsockname()[1]), int(b.getsockname()[1])


def _wait_healthy(url: str, record: ProcessRecord, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1):
                return
        except (urllib.error.URLError, OSError):
            if not is_alive(record):
                break
            time.sleep(0.2)
    raise TimeoutError(f"simulator at {url} not healthy:\n{log.read_text(errors='replace')[-2000:]}")


class Sims:
    """Simulator processes (each in its own process group) and their scrape targets."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.records: list[ProcessRecord] = []
        self.targets: list[dict[str, Any]] = []
        self.urls: dict[str, str] = {}
        self.control_urls: dict[str, str] = {}

    def start(self, pod: str, host: str, deployment: DeploymentKey, scenario: dict[str, Any], version: str) -> None:
        scenario_file = self.workdir / f"{pod}.yaml"
        scenario_file.write_text(yaml.safe_dump(scenario))
        port, control_port = _free_ports(host)
        env = {**os.environ, "TIDE_DRAFT_VERSION": version, "TIDE_TARGET_REVISION": "rev-1", "TIDE_POD_NAME": pod,
               "TIDE_CONTROL_TOKEN": TOKEN, "TIDE_CONTROL_PORT": str(control_port),
               "TIDE_LOCAL_DRAFTS_DIR": str(self.workdir)}  # the test's drafts are local directories
        record = spawn(pod, [sys.executable, "-m", "tide_vllm_sim", "--model", "tiny", "--served-model-name",
                             deployment.name, "--host", host, "--port", str(port), "--speculative-config", SPEC,
                             "--sim-scenario", str(scenario_file), "--tensor-parallel-size", "1"],
                       self.workdir / "logs", env=env)
        self.records.append(record)
        url = f"http://{host}:{port}"
        _wait_healthy(url, record, Path(record.log))
        self.urls[pod] = url
        self.control_urls[pod] = f"http://{host}:{control_port}"
        self.targets.append({"targets": [f"{host}:{port}"], "labels": {
            "namespace": deployment.namespace, "pod": pod, "label_tide_dev_deployment": deployment.name}})

    def stop(self) -> None:
        for record in self.records:
            stop(record, grace_seconds=3)


@pytest.fixture
def scraped(tmp_path: Path) -> Iterator[tuple[Sims, PrometheusServer]]:
    sims = Sims(tmp_path)
    server = None
    try:
        llama = {"seed": 1, "acceptance": A, "engine": {"step_seconds": 0.004}}
        qwen = {**llama, "timeline": [{"at_s": 0, "domain": "general", "background_running": QWEN_BACKGROUND}]}
        sims.start("llama-0", "127.1.0.1", LLAMA, llama, "initial")
        sims.start("llama-1", "127.1.0.2", LLAMA, llama, "v2")  # the canary
        sims.start("qwen-0", "127.1.0.3", QWEN, qwen, "initial")
        targets = tmp_path / "targets.json"
        targets.write_text(json.dumps(sims.targets))
        server = start_prometheus(tmp_path / "prometheus", targets, scrape_interval_s=1)
        yield sims, server
    finally:
        if server is not None:
            server.stop()
        sims.stop()


def _draft(root: Path, version: str) -> Path:
    """A registry draft directory (manifest + checksummed files) the simulator can hot-swap in."""
    directory = root / "drafts" / version
    directory.mkdir(parents=True)
    files = {"config.json": b"{}", "model.safetensors": version.encode()}
    for name, data in files.items():
        (directory / name).write_bytes(data)
    entries = {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in files.items()}
    (directory / "manifest.json").write_text(json.dumps({
        "kind": "draft", "run_id": "r3", "version": version, "created_at": "2026-01-01T00:00:00Z",
        "target_revision": "rev-1", "files": entries}))
    return directory


def _load_in_background(urls: list[str], stop: threading.Event) -> list[threading.Thread]:
    threads = [threading.Thread(target=run_load, args=(LoadSpec(url=url, domain="korean", rps=RPS, duration_s=40,
                                                                max_tokens=MAX_TOKENS), stop)) for url in urls]
    for thread in threads:
        thread.start()
    return threads


def _counting(query: Any) -> tuple[Any, list[str]]:
    calls: list[str] = []

    def counted(promql: str, at: float) -> Sequence[Mapping[str, Any]]:
        calls.append(promql)
        return query(promql, at)

    return counted, calls


def _ready(adapter: PrometheusAdapter) -> bool:
    llama, qwen = adapter.deployment(LLAMA), adapter.deployment(QWEN)
    if llama is None or qwen is None:
        return False
    groups = [llama.by_version.get("initial"), llama.by_version.get("v2"), qwen.by_version.get("initial")]
    return all(g is not None and g.drafted_tokens > 300 and g.generation_throughput for g in groups)


def test_adapter_matches_the_simulators_acceptance_per_deployment_and_version(
    scraped: tuple[Sims, PrometheusServer],
) -> None:
    sims, server = scraped
    query, calls = _counting(http_query(server.url, timeout_s=5))
    adapter = PrometheusAdapter(server.url, AdapterConfig(window_s=WINDOW_S, interval_s=0), query=query)
    stop_load = threading.Event()
    load = _load_in_background([sims.urls["llama-0"], sims.urls["llama-1"]], stop_load)
    try:
        deadline = time.monotonic() + 25
        while not _ready(adapter):
            assert time.monotonic() < deadline, f"no data for every group: {adapter.snapshot()}"
            time.sleep(1)
        time.sleep(WINDOW_S + 1)  # the whole rate window under load
        before = len(calls)
        snapshot = adapter.snapshot()
        assert len(calls) - before == len(Metric)  # one query per metric answers both deployments
    finally:
        stop_load.set()
        for thread in load:
            thread.join()
    llama, qwen = snapshot.deployments.get(LLAMA), snapshot.deployments.get(QWEN)
    assert llama is not None
    assert qwen is not None

    for version, group in (*llama.by_version.items(), ("qwen", qwen.total)):
        print(f"measured {version}: pos={group.per_position_acceptance} length={group.acceptance_length} "
              f"rate={group.acceptance_rate} tok/s={group.generation_throughput} batch={group.batch_size}")
    for version, a in (("initial", A["initial"]["korean"]), ("v2", A["v2"]["korean"])):
        group = llama.by_version[version]
        assert group.per_position_acceptance[0] == pytest.approx(a, abs=0.03), version
        assert group.acceptance_length == pytest.approx(expected_length(a, G), abs=0.05), version
        assert group.acceptance_rate == pytest.approx((expected_length(a, G) - 1) / G, abs=0.03), version
        # each pod: RPS requests/s of MAX_TOKENS tokens (loose: window edges, a busy CPU)
        assert group.generation_throughput == pytest.approx(RPS * MAX_TOKENS, rel=0.2), version
        assert group.engines == 1
    total = llama.total
    assert expected_length(0.3, G) < total.acceptance_length < expected_length(0.7, G)  # type: ignore[operator]
    assert total.engines == 2

    background = qwen.by_version["initial"]
    assert background.per_position_acceptance[0] == pytest.approx(A["initial"]["general"], abs=0.03)
    assert background.batch_size == QWEN_BACKGROUND
    assert set(qwen.by_version) == {"initial"}

    obs = observation(llama, served_version="initial", candidate_version="v2")
    assert obs.canary is not None
    assert obs.control is not None
    assert obs.canary.acceptance_length > obs.control.acceptance_length  # type: ignore[operator]
    assert obs.acceptance_samples > 0


def test_adapter_reports_prometheus_going_away(scraped: tuple[Sims, PrometheusServer]) -> None:
    _, server = scraped
    adapter = PrometheusAdapter(server.url, AdapterConfig(window_s=8, interval_s=0, timeout_s=2))
    adapter.snapshot()  # answers (possibly without series yet)
    server.stop()
    with pytest.raises(PrometheusUnavailable, match=server.url):
        adapter.snapshot()


def test_a_hot_swap_moves_the_pods_numbers_to_the_new_version(
    scraped: tuple[Sims, PrometheusServer], tmp_path: Path,
) -> None:
    """The join is evaluated now: once a window has passed after a swap, the pod's counters count
    for the version it serves (inside that window they still mix the old draft's)."""
    sims, server = scraped
    adapter = PrometheusAdapter(server.url, AdapterConfig(window_s=WINDOW_S, interval_s=0))
    stop_load = threading.Event()
    load = _load_in_background([sims.urls["llama-1"]], stop_load)
    try:
        result = sc.ServingControlClient(sims.control_urls["llama-1"], TOKEN).load_draft(
            sc.DraftLoadRequest(source=str(_draft(tmp_path, "v3")), version="v3"))
        assert result.previous_version == "v2"
        time.sleep(WINDOW_S + 2)
        deadline = time.monotonic() + 15
        while True:
            llama = adapter.deployment(LLAMA)
            v3 = llama.by_version.get("v3") if llama is not None else None
            if (v3 is not None and v3.drafted_tokens > 300) or time.monotonic() > deadline:
                break
            time.sleep(1)
    finally:
        stop_load.set()
        for thread in load:
            thread.join()
    assert llama is not None
    assert v3 is not None, llama.by_version
    assert "v2" not in llama.by_version  # no pod serves it any more
    assert v3.per_position_acceptance[0] == pytest.approx(A["v3"]["korean"], abs=0.03)
