"""`tide` (or `python -m tide_operator.cli`, or `kubectl tide`): look at TideDeployments and act on them.

Exit codes: 0 done; 1 the request failed or was refused (not found, forbidden, rejected by the schema,
a verb that does not apply, refused by the operator or not acted on within --wait); 2 a usage error;
3 no cluster configuration, or the API server unreachable.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

DURATION = re.compile(r"^(\d+)(s|m|h|d)$")
SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(text: str) -> int:
    """``90s``, ``15m``, ``6h``, ``2d`` in seconds; argparse reports the error with the option's name."""
    match = DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 90s, 15m, 6h or 2d")
    return int(match[1]) * SECONDS[match[2]]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tide-operator")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown"


def _cluster_options(default: object) -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(add_help=False, argument_default=default)
    options.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    options.add_argument("--context", help="kubeconfig context")
    options.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    return options


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tide", description=__doc__, parents=[_cluster_options(None)],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    root.add_argument("--version", action="version", version=f"tide {_version()}")
    # Also accepted after the command, like kubectl's (`tide status chat -n llm`); SUPPRESS keeps
    # the command's parser from overwriting what was given before the command.
    common = _cluster_options(argparse.SUPPRESS)
    commands = root.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", parents=[common],
                                 help="phase, conditions, pools, draft, speculation, last decisions")
    status.add_argument("name")
    status.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text",
                        help="text (default), or the whole object as json or yaml")
    status.add_argument("--events", type=int, default=5, help="how many recent Events to show (0: none)")
    history = commands.add_parser("history", parents=[common], help="draft lineage from the S3 draft registry")
    history.add_argument("name")
    history.add_argument("--s3-endpoint", help="S3 endpoint URL (default: spec.storage.s3.endpoint, else AWS)")
    history.add_argument("--credentials-from-secret", action="store_true",
                         help="use the Secret spec.storage.s3.credentialsSecret (default: your AWS credentials)")
    history.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    get = commands.add_parser("get", parents=[common], help="list TideDeployments (like kubectl get)")
    get.add_argument("name", nargs="?", help="one TideDeployment (default: all in the namespace)")
    get.add_argument("-A", "--all-namespaces", action="store_true", help="in every namespace")
    get.add_argument("-o", "--output", choices=["table", "wide", "json", "yaml"], default="table")
    get.add_argument("-w", "--watch", action="store_true", help="after the list, print a row at every change")
    get.add_argument("--watch-timeout", type=duration_s, default=None, help=argparse.SUPPRESS)  # tests
    _add_verbs(commands, common)
    completion = commands.add_parser("completion", help="print a shell completion script: "
                                     "source <(tide completion bash)")
    completion.add_argument("shell", choices=["bash", "zsh", "tcsh"])
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


VERBS = {
    "pause": "stop acting on it: no switches, training or promotion (spec.control.paused)",
    "resume": "act on it again (spec.control.paused=false)",
    "pin": "serve VERSION and nothing else until unpinned (spec.control.draftPin)",
    "unpin": "let the loop choose the draft again (removes spec.control.draftPin)",
    "abort": "roll the running canary back (the pointer never moved)",
    "promote": "serve VERSION, a draft promoted before (a pointer flip, recorded as manual)",
    "rollback": "back to the version served before the current one (a pointer flip, recorded as manual)",
    "rotate-token": "rotate the pods' control token (the old one is accepted for a grace period)",
}
REQUESTS = ("abort", "promote", "rollback")  # one-shot annotations the operator consumes (control/manual.py)


def _add_verbs(commands: Any, common: argparse.ArgumentParser) -> None:
    for verb, text in VERBS.items():
        command = commands.add_parser(verb, parents=[common], help=text)
        command.add_argument("name")
        if verb in ("pin", "promote"):
            command.add_argument("version", help="a promoted draft version, e.g. v3")
        if verb in REQUESTS:
            command.add_argument("--wait", type=duration_s, default=0, metavar="DURATION",
                                 help="wait up to DURATION (e.g. 60s) for the operator to act, and print what it did")


def run_status(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.kube import read_tide_deployment, tide_events
    from tide_operator.cli.listing import render_document
    from tide_operator.cli.status import render_status

    obj = read_tide_deployment(api, namespace, args.name)
    if args.output != "text":
        sys.stdout.write(render_document(obj, args.output))
        return 0
    events = tide_events(api, namespace, args.name)[-args.events:] if args.events > 0 else []
    sys.stdout.write(render_status(obj, events))
    return 0


def run_history(args: argparse.Namespace, api: object, namespace: str) -> int:
    from tide_operator.cli.history import as_document, draft_pool, lineage, registry_for, render_history, s3_client
    from tide_operator.cli.kube import read_secret, read_tide_deployment

    obj = read_tide_deployment(api, namespace, args.name)
    secret = obj["spec"]["storage"]["s3"].get("credentialsSecret")
    if args.credentials_from_secret and not secret:
        sys.stderr.write("tide: spec.storage.s3.credentialsSecret is not set; using your AWS credentials\n")
    credentials = read_secret(api, namespace, secret) if args.credentials_from_secret and secret else None
    registry = registry_for(obj, s3_client(obj, credentials, args.s3_endpoint))
    rows, events = lineage(registry)
    pool = draft_pool(registry, obj)
    if args.output != "text":
        from tide_operator.cli.listing import render_document

        sys.stdout.write(render_document(as_document(rows, events, pool), args.output))
        return 0
    sys.stdout.write(render_history(rows, events, f"{namespace}/{args.name}", pool))
    return 0


def run_get(args: argparse.Namespace, api: object, namespace: str) -> int:
    from datetime import UTC, datetime

    from tide_operator.cli.kube import list_tide_deployments, read_tide_deployment, watch_tide_deployments
    from tide_operator.cli.listing import as_list, render_document, render_table

    scope = None if args.all_namespaces else namespace
    objs = [read_tide_deployment(api, namespace, args.name)] if args.name else list_tide_deployments(api, scope)
    if args.output in ("json", "yaml"):
        sys.stdout.write(render_document(objs[0] if args.name else as_list(objs), args.output))
        return 0
    wide, show_ns = args.output == "wide", args.all_namespaces
    if not objs and not args.watch:
        sys.stderr.write(f"No TideDeployments found in {'any namespace' if show_ns else namespace}.\n")
    sys.stdout.write(render_table(objs, datetime.now(UTC), wide=wide, namespace=show_ns))
    if args.watch:
        sys.stdout.flush()
        for kind, obj in watch_tide_deployments(api, scope, args.watch_timeout):
            if kind == "ERROR" or (args.name and obj["metadata"]["name"] != args.name):
                continue
            sys.stdout.write(render_table([obj], datetime.now(UTC), wide=wide, namespace=show_ns, header=False))
            sys.stdout.flush()
    return 0


def run_verb(args: argparse.Namespace, api: object, namespace: str) -> int:
    from datetime import UTC, datetime

    from tide_operator.cli import verbs
    from tide_operator.cli.kube import patch_tide_deployment, read_tide_deployment

    obj = read_tide_deployment(api, namespace, args.name)
    asked = datetime.now(UTC).replace(microsecond=0)
    request = asked.strftime("%Y-%m-%dT%H:%M:%SZ")  # a new value each time: one request per call
    if args.command in ("pin", "promote"):
        edit = {"pin": verbs.pin, "promote": verbs.promote}[args.command](obj, args.version)
    elif args.command == "rotate-token":
        edit = verbs.rotate_token(obj, str(int(time.time())))
    elif args.command in ("abort", "rollback"):
        edit = {"abort": verbs.abort, "rollback": verbs.rollback}[args.command](obj, request)
    else:
        edit = {"pause": verbs.pause, "resume": verbs.resume, "unpin": verbs.unpin}[args.command](obj)
    if edit.patch is not None:
        patch_tide_deployment(api, namespace, args.name, edit.patch)
    sys.stdout.write(edit.summary + "\n")
    if edit.patch is None or not getattr(args, "wait", 0):
        return 0
    return _wait_for_operator(api, namespace, args.name, edit.patch, request, args.wait)


def _wait_for_operator(api: object, namespace: str, name: str, patch: dict[str, Any], asked: str,
                       timeout_s: int) -> int:
    """Until the operator consumed the request (its annotation gone); its Events about it, printed."""
    from tide_operator.cli.kube import read_tide_deployment, tide_events

    annotation = next(iter(patch["metadata"]["annotations"]))
    deadline = time.monotonic() + timeout_s
    while annotation in (read_tide_deployment(api, namespace, name)["metadata"].get("annotations") or {}):
        if time.monotonic() > deadline:
            sys.stderr.write(f"tide: the operator has not acted on {annotation} after {timeout_s}s "
                             "(is it running? `tide status` shows why it waits)\n")
            return 1
        time.sleep(1)
    notes: list[Any] = []
    for _ in range(10):  # the operator posts its Events asynchronously: they may trail the annotation's removal
        notes = [e for e in tide_events(api, namespace, name) if annotation in e.message and (e.time or "") >= asked]
        if notes:
            break
        time.sleep(0.5)
    for note in notes:
        sys.stdout.write(f"{note.type} {note.reason}: {note.message}\n")
    return 1 if any(note.reason == "RequestRefused" for note in notes) else 0


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


COMMANDS = {"status": run_status, "history": run_history, "plot": run_plot, "calibrate": run_calibrate,
            "get": run_get, **dict.fromkeys(VERBS, run_verb)}


def completion_script(shell: str) -> str:
    import shtab

    return str(shtab.complete(parser(), shell=shell))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "completion":  # no cluster needed
        sys.stdout.write(completion_script(args.shell))
        return 0
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """The command against the cluster: its errors as one line and an exit code (module docstring)."""
    import warnings

    from urllib3.exceptions import InsecureRequestWarning

    # A kubeconfig with insecure-skip-tls-verify is the user's choice; kubectl says nothing on each call.
    warnings.filterwarnings("ignore", category=InsecureRequestWarning)
    from kubernetes.config import ConfigException
    from urllib3.exceptions import HTTPError

    from tide_operator.cli.errors import api_error, unreachable
    from tide_operator.cli.kube import api_client, default_namespace
    from tide_operator.cli.verbs import VerbRefused

    try:
        api = api_client(args.kubeconfig, args.context) if _needs_cluster(args) else None
    except (ConfigException, OSError) as err:
        sys.stderr.write(f"tide: no Kubernetes configuration: {err}\n")
        return 3
    namespace = args.namespace or default_namespace(args.kubeconfig, args.context)
    from kubernetes.client.rest import ApiException

    try:
        return COMMANDS[args.command](args, api, namespace)
    except ApiException as err:
        sys.stderr.write(api_error(err, namespace, getattr(args, "name", None)) + "\n")
        return 1
    except HTTPError as err:  # urllib3: the API server did not answer (refused, DNS, TLS, timeout)
        sys.stderr.write(unreachable(api, err) + "\n")
        return 3
    except VerbRefused as err:
        sys.stderr.write(f"tide {args.command}: {err}\n")
        return 1
    except (OSError, RuntimeError) as err:  # Prometheus or S3 unreachable or refusing: say which, no traceback
        sys.stderr.write(f"tide {args.command}: {err}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
