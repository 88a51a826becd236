"""`tide` (or `python -m tide_operator.cli`, or `kubectl tide`): status, plots and calibration of TideDeployments."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """``90s``, ``15m``, ``6h``, ``2d`` in seconds; argparse reports the error with the option's name."""
    match = DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 15m, 6h or 2d")
    return int(match[1]) * SECONDS[match[2]]


def _cluster_options(default: object) -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False, argument_default=default)
    options.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    options.add_argument("--context", help="kubeconfig context")
    options.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    return options


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tide", description=__doc__, parents=[_cluster_options(None)])
    # Also accepted after the command, like kubectl's (`tide status chat -n llm`); SUPPRESS keeps
    # the command's parser from overwriting what was given before the command.
    common = _cluster_options(argparse.SUPPRESS)
    commands = root.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", parents=[common],
                                 help="phase, conditions, pools, draft, speculation, last decisions")
    status.add_argument("name")
    status.add_argument("-o", "--output", choices=["text", "json"], default="text")
    status.add_argument("--events", type=int, default=5, help="how many recent Events to show (0: none)")
    history = commands.add_parser("history", parents=[common], help="draft lineage from the S3 draft registry")
    history.add_argument("name")
    history.add_argument("--s3-endpoint", help="S3 endpoint URL (default: spec.storage.s3.endpoint, else AWS)")
    history.add_argument("--credentials-from-secret", action="store_true",
                         help="use the Secret spec.storage.s3.credentialsSecret (default: your AWS credentials)")
    plot = commands.add_parser("plot", parents=[common],
                               help="PNG timeline: acceptance, speculation, batch size, promotions")
    plot.add_argument("name")
    plot.add_argument("--prometheus", required=True, help="Prometheus URL, e.g. http://localhost:9090")
    plot.add_argument("--out", type=Path, default=Path("tide.png"), help="PNG file to write")
    plot.add_argument("--since", type=duration_s, default=3600, help="how far back (default 1h)")
    plot.add_argument("--step", type=duration_s, default=None, help="resolution (default: window / 300)")
    plot.add_argument("--rate-window", default=None, help="rate() range, e.g. 1m (default: 4 steps, >= 10s)")
    plot.add_argument("--deployment-label", default="label_tide_dev_deployment",
                      help="label naming the TideDeployment on vLLM series")
    from tide_operator.cli.calibrate import add_parser

    add_parser(commands, common)
    return root


def run_status(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.kube import read_tide_deployment, tide_events
    from tide_operator.cli.status import render_status

    obj = read_tide_deployment(api, namespace, args.name)
    if args.output == "json":
        sys.stdout.write(json.dumps(obj.get("status") or {}, indent=2) + "\n")
        return 0
    events = tide_events(api, namespace, args.name)[-args.events:] if args.events > 0 else []
    sys.stdout.write(render_status(obj, events))
    return 0


def run_history(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.history import lineage, registry_for, render_history, s3_client
    from tide_operator.cli.kube import read_secret, read_tide_deployment

    obj = read_tide_deployment(api, namespace, args.name)
    secret = obj["spec"]["storage"]["s3"].get("credentialsSecret")
    if args.credentials_from_secret and not secret:
        sys.stderr.write("tide: spec.storage.s3.credentialsSecret is not set; using your AWS credentials\n")
    credentials = read_secret(api, namespace, secret) if args.credentials_from_secret and secret else None
    rows, events = lineage(registry_for(obj, s3_client(obj, credentials, args.s3_endpoint)))
    sys.stdout.write(render_history(rows, events, f"{namespace}/{args.name}"))
    return 0


def run_plot(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.kube import read_tide_deployment, tide_events
    from tide_operator.cli.plot import plot_timeline
    from tide_operator.cli.timeline import Queries, build_timeline, prometheus_query_range

    read_tide_deployment(api, namespace, args.name)  # a clear 404 for a wrong name, not an empty plot
    end = time.time()
    start = end - args.since
    step = args.step or max(1, args.since // 300)
    window = args.rate_window or f"{max(10, 4 * step)}s"
    queries = Queries(namespace, args.name, window, args.deployment_label)
    timeline = build_timeline(queries, prometheus_query_range(args.prometheus, start, end, step),
                              tide_events(api, namespace, args.name), start, end)
    out = plot_timeline(timeline, args.out)
    sys.stdout.write(f"wrote {out}\n")
    return 0


def run_calibrate(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.calibrate import run_calibrate as calibrate

    try:
        sys.stdout.write(calibrate(args, api, namespace))
    except ValueError as err:  # no ConfigMap named, a bad measurement: say so, no traceback
        sys.stderr.write(f"tide calibrate: {err}\n")
        return 1
    return 0


def _needs_cluster(args: argparse.Namespace) -> bool:
    from tide_operator.cli.calibrate import needs_cluster

    return args.command != "calibrate" or needs_cluster(args)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from kubernetes.client.rest import ApiException

    from tide_operator.cli.kube import api_client, default_namespace

    api = api_client(args.kubeconfig, args.context) if _needs_cluster(args) else None
    namespace = args.namespace or default_namespace(args.kubeconfig, args.context)
    try:
        command = {"status": run_status, "history": run_history, "plot": run_plot, "calibrate": run_calibrate}
        return command[args.command](args, api, namespace)
    except ApiException as err:
        if err.status == 404:
            sys.stderr.write(f"tide: TideDeployment {namespace}/{args.name} not found\n")
            return 1
        raise
    except (OSError, RuntimeError) as err:  # Prometheus or S3 unreachable or refusing: say which, no traceback
        sys.stderr.write(f"tide {args.command}: {err}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
