"""The node agent: registers the fake nodes, renews their heartbeats, and runs the kubelet."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from kubernetes import client

from tide_localcluster.client import api_client
from tide_localcluster.heartbeat import register, run_heartbeats
from tide_localcluster.images import load_catalog
from tide_localcluster.kubelet import Kubelet
from tide_localcluster.nodepools import load_pools
from tide_localcluster.plane import PlaneInfo


def run_agent(state_dir: Path, pools_file: Path, images_file: Path | None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    info = PlaneInfo.load(state_dir)
    nodes = load_pools(pools_file).nodes()
    api = api_client(info)
    core = client.CoreV1Api(api)
    for node in nodes:
        register(core, node)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    kubelet = Kubelet(api, {n.name for n in nodes}, state_dir, load_catalog(images_file),
                      Path(info.prometheus_targets))
    beats = threading.Thread(target=run_heartbeats, args=(api_client(info), nodes, stop),
                             kwargs={"lost": kubelet.lost}, daemon=True)
    beats.start()
    logging.getLogger("agent").info("nodes %s registered; kubelet running", [n.name for n in nodes])
    kubelet.run(stop)  # returns after stopping every pod process on SIGTERM
