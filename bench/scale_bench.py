"""Scale benchmark (issue 18): the real operator on the local control plane with N TideDeployments.

    .venv/bin/python bench/scale_bench.py [--sizes 10,30,100] [--with-pods 20] [--pending 2000]
                                          [--window 60] [--settle 30] [--check]

Runs by hand, not in CI (about 15 minutes on 2 cores for the default sizes). One plane for every
size: the fleet grows from one size to the next. Of the N TideDeployments the first min(N,
--with-pods) serve one simulator pod each (their control pass runs against the plane's Prometheus),
the others have `replicas: 0`; --pending unrelated pods in another namespace stay Pending (a node
selector no node has), so a cluster-wide cache grows with the cluster. The operator runs as its own
process and user with the product defaults (resync 30 s, Prometheus snapshot every 10 s); the
deployments keep the default control settings, with capture off (a steady fleet, not a learning one).

For each size, once every deployment is steady (the ones with a pod Serving, every one's status at
its generation) and one resync interval (--settle) has passed, one window of --window seconds:
- RSS: the operator's largest VmRSS (/proc/<pid>/status), sampled every second;
- passes: the count of the operator's reconcile histogram (tide_operator_reconcile_duration_seconds)
  at the end minus at the start; p50/p99 from the window's own buckets (end minus start),
  interpolated linearly within a bucket as Prometheus's histogram_quantile does;
- API requests per pass: the operator user's gets, writes and lists from the apiserver's audit log
  between two byte marks, divided by the passes. Lists Kopf makes (user agent kopf/...) start or
  restart its watches: counted apart as re-lists; lists by the kubernetes client are the passes'.
  Watches are not counted (logged when they close). Kopf's own writes for a pass (the status patch,
  Events) count as the pass's writes;
- PromQL queries per interval: Prometheus's prometheus_http_requests_total{handler="/api/v1/query"}
  over the window, divided by window / prometheusIntervalSeconds. One endpoint (the plane's) serves
  every deployment, and the bench itself sends no query.
--check exits 1 when a target of issue 18 is missed at the largest N (bench/scale/report.py).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: bench.scale

from bench.scale import measure
from bench.scale.fleet import BUCKET, PENDING_NAMESPACE, Fleet, operator_config, write_pools, write_scenario
from bench.scale.report import Measurement, bucket_delta, check, quantile, table
from tide_operator.config import OperatorConfig

DEFAULTS = OperatorConfig()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,30,100", help="TideDeployment counts, grown in this order")
    p.add_argument("--with-pods", type=int, default=20, help="at most this many deployments serve a pod")
    p.add_argument("--pending", type=int, default=2000, help="unrelated Pending pods in another namespace")
    p.add_argument("--window", type=float, default=60.0, help="seconds of each measurement window")
    p.add_argument("--settle", type=float, default=DEFAULTS.resync_interval_seconds,
                   help="seconds between steady and the window (default: one resync interval)")
    p.add_argument("--steady-timeout", type=float, default=900.0, help="give up on a size after this long")
    p.add_argument("--json", type=Path, default=None, help="also write the measurements here")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed at the largest N")
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    if sorted(args.sizes) != args.sizes or args.sizes[0] < 1:
        p.error("--sizes: positive and ascending (the fleet only grows)")
    if args.window < DEFAULTS.resync_interval_seconds:
        # Every timer fires once per resync interval: a shorter window may hold no pass at all.
        say(f"warning: --window {args.window:.0f}s is shorter than the resync interval "
            f"({DEFAULTS.resync_interval_seconds:.0f}s); use a multiple of it")
    return args


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def wait_steady(fleet: Fleet, with_pods: int, timeout_s: float) -> None:
    deadline, last = time.monotonic() + timeout_s, ""
    while (missing := fleet.steady(with_pods)) is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"not steady after {timeout_s:.0f}s: {missing}")
        if missing != last:
            say(f"  {missing}")
            last = missing
        time.sleep(3)


def snapshot(operator: Any, prometheus_url: str, audit_log: Path) -> dict[str, Any]:
    return {"at": time.monotonic(), "audit": measure.audit_mark(audit_log),
            "buckets": measure.reconcile_buckets(measure.scrape(f"http://127.0.0.1:{operator.metrics_port}/metrics")),
            "queries": measure.instant_queries(measure.scrape(f"{prometheus_url}/metrics"))}


def measure_window(size: int, with_pods: int, window_s: float, operator: Any, info: Any) -> Measurement:
    from tide_localcluster.plane import OPERATOR_USER

    audit_log = Path(info.audit_log)
    with measure.PeakRss(operator.process.pid) as rss:
        before = snapshot(operator, info.prometheus_url, audit_log)
        time.sleep(window_s)
        after = snapshot(operator, info.prometheus_url, audit_log)
    calls = measure.count_calls(audit_log, OPERATOR_USER, before["audit"], after["audit"])
    say("  calls in the window: " + ", ".join(f"{k}={v}" for k, v in sorted(calls.by_call.items())))
    window = bucket_delta(after["buckets"], before["buckets"])
    passes = int(max((count for bound, count in window if bound == float("inf")), default=0))
    return Measurement(size=size, with_pods=with_pods, window_s=after["at"] - before["at"],
                       prometheus_interval_s=DEFAULTS.prometheus_interval_seconds, passes=passes,
                       rss_mib=rss.peak, gets=calls.gets, writes=calls.writes, lists=calls.lists,
                       relists=calls.relists, promql_queries=int(after["queries"] - before["queries"]),
                       p50_s=quantile(0.5, window), p99_s=quantile(0.99, window))


def start_cluster(args: argparse.Namespace, work: Path, stack: ExitStack) -> tuple[Any, Fleet, int]:
    """Plane, S3, CRD, RBAC, namespaces and the Pending pods; each stops when ``stack`` closes."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tide_e2e.operator_install import grant_operator_rbac, install_crd
    from tide_localcluster import binaries, plane
    from tide_localcluster.client import api_client
    from tide_localcluster.paths import DEFAULT_IMAGES

    binaries.ensure_built()
    state = work / "plane"
    pools = write_pools(work / "pools.yaml", max(min(s, args.with_pods) for s in args.sizes))
    say("starting the local plane (etcd, apiserver, controller-manager, scheduler, nodes, Prometheus)")
    stack.callback(say, "plane stopped and removed")
    stack.callback(plane.down, state)
    info = plane.up(state, pools, DEFAULT_IMAGES)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    s3_server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    s3_server.start()
    stack.callback(s3_server.stop)
    host, port = s3_server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="a",
                 aws_secret_access_key="b").create_bucket(Bucket=BUCKET)
    install_crd(api_client(info))
    grant_operator_rbac(api_client(info))
    fleet = Fleet(info, endpoint)
    fleet.prepare()
    started = time.monotonic()
    pending = fleet.pending_pods(args.pending)
    say(f"{pending} Pending pods in {PENDING_NAMESPACE} ({time.monotonic() - started:.0f}s)")
    return info, fleet, pending


def run(args: argparse.Namespace, work: Path, rows: list[Measurement]) -> None:
    """Measures each size into ``rows`` (the caller keeps what was measured if a later size fails)."""
    from tide_e2e.operator_install import OperatorProcess

    with ExitStack() as stack:
        info, fleet, pending = start_cluster(args, work, stack)
        operator = OperatorProcess(info, operator_config(write_scenario(work / "scenario.yaml"))).start()
        stack.callback(operator.stop)
        say(f"operator pid {operator.process.pid}: resync {DEFAULTS.resync_interval_seconds:.0f}s, Prometheus "
            f"interval {DEFAULTS.prometheus_interval_seconds:.0f}s (product defaults)")
        for size in args.sizes:
            with_pods = min(size, args.with_pods)
            say(f"N={size}: {with_pods} with a simulator pod, {size - with_pods} with replicas 0")
            fleet.grow(size, with_pods)
            wait_steady(fleet, with_pods, args.steady_timeout)
            say(f"  steady; settling {args.settle:.0f}s, then a {args.window:.0f}s window")
            time.sleep(args.settle)
            rows.append(measure_window(size, with_pods, args.window, operator, info))
            still = fleet.pending_count()
            if still != pending:
                raise RuntimeError(f"{pending - still} unrelated pods left Pending: the scenario is broken")
            say("  " + table(rows[-1:])[1])


def _interrupt(*_: object) -> None:
    """SIGTERM as Ctrl-C: the exit stack stops the operator, S3 and the plane either way."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    rows: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="tide-scale-") as tmp:
        try:
            run(args, Path(tmp), rows)
        except KeyboardInterrupt:
            say("interrupted; everything was stopped")
            return 130
        except BaseException:  # a later size failed: still print what the sizes before it measured
            print("\n".join(["measured before the failure:", *table(rows)]) if rows else "nothing measured")
            raise
    print(f"\nscale benchmark on {os.cpu_count()} CPUs, window {args.window:.0f}s, {args.pending} Pending pods:")
    print("\n".join(table(rows)))
    if args.json:
        args.json.write_text(json.dumps([asdict(m) for m in rows], indent=1))
    missed = check(rows)
    for line in missed:
        print(f"MISSED: {line}")
    if not missed:
        print(f"every target holds at N={rows[-1].size}")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
