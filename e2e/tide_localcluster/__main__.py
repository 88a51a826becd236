"""`python -m tide_localcluster build|up|down|status|agent`: the local control plane tool."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from tide_localcluster import binaries, plane
from tide_localcluster.images import ImageCatalogError
from tide_localcluster.nodepools import PoolFileError, load_pools
from tide_localcluster.paths import DEFAULT_IMAGES, DEFAULT_POOLS, default_state_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tide-localcluster", description=__doc__)
    parser.add_argument("--state", type=Path, default=default_state_dir(), help="state directory of the plane")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build and cache kube-apiserver/controller-manager/scheduler (once)")
    up = sub.add_parser("up", help="start etcd, the control plane, fake GPU nodes and the process kubelet")
    up.add_argument("--pools", type=Path, default=DEFAULT_POOLS, help="node-pool YAML file")
    up.add_argument("--images", type=Path, default=DEFAULT_IMAGES,
                    help="image catalog YAML (image -> local environment)")
    up.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    sub.add_parser("down", help="stop exactly the processes `up` started and remove the state")
    sub.add_parser("status", help="print the kubeconfig path and process state")
    agent = sub.add_parser("agent", help=argparse.SUPPRESS)
    agent.add_argument("--pools", type=Path, required=True)
    agent.add_argument("--images", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (binaries.MissingDependencyError, PoolFileError, ImageCatalogError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"error: {' '.join(map(str, e.cmd))} failed with exit code {e.returncode}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "build":
        print(binaries.ensure_built())
    elif args.command == "up":
        load_pools(args.pools)  # fail on a bad pool file before anything starts
        binaries.ensure_built()
        started = time.monotonic()
        info = plane.up(args.state, args.pools, args.images, with_prometheus=not args.no_prometheus)
        print(f"local cluster up in {time.monotonic() - started:.1f}s")
        if info.prometheus_url:
            print(f"prometheus {info.prometheus_url}")
        print(f"export KUBECONFIG={info.kubeconfig}")
    elif args.command == "down":
        plane.down(args.state)
        print(f"stopped and removed {args.state}")
    elif args.command == "status":
        info = plane.PlaneInfo.load(args.state)
        print(f"server {info.server}\nkubeconfig {info.kubeconfig}\nprometheus {info.prometheus_url or '-'}")
    elif args.command == "agent":
        from tide_localcluster.agent import run_agent

        run_agent(args.state, args.pools, args.images)
    return 0


if __name__ == "__main__":
    sys.exit(main())
