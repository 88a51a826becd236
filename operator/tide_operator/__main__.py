"""`python -m tide_operator`: run the operator (Kopf) against the current kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tide-operator", description=__doc__)
    parser.add_argument("--namespace", "-n", action="append", default=[],
                        help="watch only this namespace (repeatable); default: all namespaces")
    parser.add_argument("--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)

    import kopf

    import tide_operator.handlers  # noqa: F401  (registers the handlers)

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat.PLAIN)
    asyncio.run(kopf.operator(
        standalone=True, clusterwide=not args.namespace, namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
