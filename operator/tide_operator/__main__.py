"""`python -m tide_operator`: run the operator (Kopf) against the current kubeconfig or in-cluster."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from contextlib import suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tide_operator.adapters.leader_election import LeaderElector
    from tide_operator.config import LeaderElectionConfig

log = logging.getLogger("tide_operator")
EXIT_LEADERSHIP_LOST = 1  # non-zero: Kubernetes restarts the container, which comes back as a follower

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
    parser.add_argument("--no-leader-election", dest="leader_election", action="store_false",
                        help="act at once without taking the leader Lease (a single local process only; "
                             "default: the config's leaderElection.enabled)")
    return parser.parse_args(argv)


def configure_logging(args: argparse.Namespace) -> None:
    import kopf

    kopf.configure(verbose=args.verbose, log_format=kopf.LogFormat[LOG_FORMATS[args.log_format]])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import tide_operator.adapters.kopf_login  # noqa: F401  (Kopf logs in with this process's User-Agent)
    from tide_operator import handlers, metrics  # importing handlers registers them

    handlers.CLUSTERWIDE = not args.namespace
    configure_logging(args)
    if os.environ.get(metrics.PORT_ENV):  # the chart sets it; local runs may leave it out
        metrics.start_metrics_server()  # before the election: a follower's tide_operator_leader reads 0
    election = handlers.CONFIG.leader_election
    if not (args.leader_election and election.enabled):
        metrics.set_leader(True)
        asyncio.run(run_kopf(args))
        return 0
    return asyncio.run(run_elected(args, election))


async def run_kopf(args: argparse.Namespace) -> None:
    import kopf

    await kopf.operator(
        standalone=True, clusterwide=not args.namespace, namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )


async def run_elected(args: argparse.Namespace, election: LeaderElectionConfig) -> int:
    """Kopf starts only once this process holds the Lease; it stops at once when the Lease is lost."""
    from tide_operator import metrics
    from tide_operator.adapters.leader_election import wait_for_leadership

    elector = build_elector(election)
    metrics.set_leader(False)
    log.info("Leader election: %s waits for lease %s/%s", elector.identity, elector.store.namespace,
             elector.store.name)
    if not await wait_for_leadership(elector, args.liveness):
        await asyncio.to_thread(elector.release)
        return 0
    metrics.set_leader(True)
    holding = asyncio.create_task(elector.hold(on_lost=exit_lost_leadership))
    try:
        await run_kopf(args)
    finally:
        holding.cancel()
        with suppress(asyncio.CancelledError):
            await holding
        metrics.set_leader(False)
        await asyncio.to_thread(elector.release)  # Kopf has stopped: the follower may act at once
    return 0


def build_elector(election: LeaderElectionConfig) -> LeaderElector:
    from kubernetes import client, config

    from tide_operator.adapters.leader_election import LeaderElector, LeaseStore
    from tide_operator.control.leadership import LeaseTimings
    from tide_operator.process_identity import IDENTITY, USER_AGENT

    namespace = election.lease_namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        raise SystemExit("leader election needs the Lease's namespace: set POD_NAMESPACE or "
                         "leaderElection.leaseNamespace, or pass --no-leader-election")
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.ApiClient()
    api.user_agent = USER_AGENT
    timings = LeaseTimings(duration_s=election.lease_duration_seconds,
                           renew_deadline_s=election.renew_deadline_seconds, retry_s=election.retry_period_seconds)
    store = LeaseStore(api, namespace, election.lease_name, timeout_s=timings.renew_deadline_s / 2)
    return LeaderElector(store, IDENTITY, timings)


def exit_lost_leadership() -> None:
    """Stop acting at once (controller-runtime exits too): no handler may write after the Lease is gone."""
    log.error("Leader election: lost the lease; exiting so that Kubernetes restarts this process as a follower")
    logging.shutdown()
    os._exit(EXIT_LEADERSHIP_LOST)


if __name__ == "__main__":
    sys.exit(main())
