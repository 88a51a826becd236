"""Run Debian's Prometheus on loopback, scraping the pods the process kubelet lists.

Debian's build has no kubernetes_sd_configs, so the kubelet writes a file_sd target file from
running pods (annotation prometheus.io/scrape=true, pod labels as `label_<name>`), which this
Prometheus re-reads every few seconds. Real clusters use the chart's PodMonitor instead.
"""

from __future__ import annotations

import ssl
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


def _answers(url: str, context: ssl.SSLContext | None) -> bool:
    """Prometheus serves /-/ready (401 counts: a web config with basic auth guards every path)."""
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2, context=context) as r:
            return r.status == 200
    except urllib.error.HTTPError as err:
        return err.code == 401
    except (urllib.error.URLError, OSError):
        return False


def start_prometheus(workdir: Path, targets_file: Path, scrape_interval_s: float = 2.0,
                     timeout_s: float = 60.0, web_config: Path | None = None,
                     ca_file: Path | None = None) -> PrometheusServer:
    """``web_config``: Prometheus' --web.config.file (TLS, basic auth); with ``ca_file`` (the CA of
    its certificate) the server is https:// and readiness is checked with that CA."""
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
        *([f"--web.config.file={web_config}"] if web_config else []),
    ], workdir / "logs")
    url = f"{'https' if ca_file else 'http'}://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _answers(url, context):
            return PrometheusServer(url=url, record=record)
        if not is_alive(record):
            break
        time.sleep(0.5)
    stop(record)
    raise TimeoutError(f"prometheus not ready; log:\n{tail(Path(record.log))}")
