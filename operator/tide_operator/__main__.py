"""`python -m tide_operator`: run the operator (Kopf) against the current kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import sys

# --log-format choice -> the name of Kopf's LogFormat. Kopf owns the root handler either way (one line
# per record); "plain" is Kopf's timestamped text, "json" one JSON object per line for log shippers.
LOG_FORMATS = {"plain": "FULL", "json": "JSON"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tide-operator", description=__doc__)
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--log-format", choices=sorted(LOG_FORMATS), default="plain",
                        help="plain: timestamped text; json: one JSON object per line (default: plain)")
    return parser.parse_args(argv)


def configure_logging(args: argparse.Namespace) -> None:
    import kopf

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[LOG_FORMATS[args.log_format]])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import kopf

    from tide_operator import handlers  # registers the handlers

    handlers.CLUSTERWIDE = not args.namespace
    configure_logging(args)
    asyncio.run(kopf.operator(
        standalone=True, clusterwide=not args.namespace, namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
