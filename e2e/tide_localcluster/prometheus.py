"""Run Debian's Prometheus on loopback, scraping the pods the process kubelet lists.

Debian's build has no kubernetes_sd_configs, so the kubelet writes a file_sd target file from
running pods (annotation prometheus.io/scrape=true, pod labels as `label_<name>`), which this
Prometheus re-reads every few seconds. Real clusters use the chart's PodMonitor instead.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tide_localcluster.binaries import system_binary
from tide_localcluster.plane import free_port, tail
from tide_localcluster.processes import ProcessRecord, is_alive, spawn, stop


@dataclass(frozen=True)
class PrometheusServer:
    url: str
    record: ProcessRecord

    def stop(self) -> None:
        stop(self.record)


def scrape_config(targets_file: Path, scrape_interval_s: float) -> dict:
    interval = f"{scrape_interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "pods",
            "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "2s"}],
        }],
    }


def start_prometheus(workdir: Path, targets_file: Path, scrape_interval_s: float = 2.0,
                     timeout_s: float = 60.0) -> PrometheusServer:
    workdir.mkdir(parents=True, exist_ok=True)
    if not targets_file.exists():
        targets_file.parent.mkdir(parents=True, exist_ok=True)
        targets_file.write_text("[]")
    config = workdir / "prometheus.yml"
    config.write_text(yaml.safe_dump(scrape_config(targets_file, scrape_interval_s)))
    port = free_port()
    record = spawn("prometheus", [
        str(system_binary("prometheus", "prometheus")), f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d", "--web.enable-lifecycle",
    ], workdir / "logs")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return PrometheusServer(url=url, record=record)
        except (urllib.error.URLError, OSError):
            pass
        if not is_alive(record):
            break
        time.sleep(0.5)
    stop(record)
    raise TimeoutError(f"prometheus not ready; log:\n{tail(Path(record.log))}")
