"""`tide calibrate`: measure a serving pod's cost profile and write the ConfigMap the spec names.

The measurement is a concurrency sweep from outside the engine (tide_operator.adapters.calibration_sweep), or
a saved one (--measurements); the points come from control/calibration.py; the ConfigMap gets the
document cost_profile_source.py reads ({"points": [...]}) under the referenced key.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from tide_operator.control.calibration import Sweep, cost_points, spec_points, sweep_from_json, sweep_to_json

DEFAULT_KEY = "profile.json"


def add_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    cal = commands.add_parser("calibrate", parents=[common], help="measure the cost profile and write its ConfigMap")
    cal.add_argument("name", nargs="?", help="TideDeployment whose spec.control.costProfile.configMapRef to write")
    source = cal.add_mutually_exclusive_group(required=True)
    source.add_argument("--endpoint", help="a serving pod's OpenAI API, e.g. http://localhost:8000")
    source.add_argument("--measurements", type=Path, help="a sweep saved with --save-measurements")
    cal.add_argument("--control-url", help="the pod's control routes (needed with --endpoint), e.g. http://localhost:8081")
    cal.add_argument("--token-file", type=Path, help="bearer token file for the control routes "
                     "(default: $TIDE_CONTROL_TOKEN)")
    cal.add_argument("--concurrency", default="1,2,4,8,16", help="concurrencies to sweep (default 1,2,4,8,16)")
    cal.add_argument("--tokens", type=int, default=64, help="tokens per request (default 64)")
    cal.add_argument("--rounds", type=int, default=5, help="rounds per point and mode, the fastest counts (default 5)")
    cal.add_argument("--prompt", action="append", help="prompt text (repeatable; default: a generic one)")
    cal.add_argument("--save-measurements", type=Path, help="write the sweep's measurements here")
    cal.add_argument("--config-map", help="ConfigMap name (default: the TideDeployment's configMapRef)")
    cal.add_argument("--key", help=f"key in the ConfigMap (default: the configMapRef's, else {DEFAULT_KEY})")
    cal.add_argument("--dry-run", action="store_true", help="print the ConfigMap instead of writing it")
    cal.add_argument("-o", "--output", choices=["yaml", "json"], help="print the ConfigMap in this format (no write)")


def needs_cluster(args: argparse.Namespace) -> bool:
    return not ((args.dry_run or args.output) and args.config_map)


def measure(args: argparse.Namespace) -> Sweep:
    if args.measurements:
        return sweep_from_json(json.loads(args.measurements.read_text()))
    from tide_contracts import serving_control as sc
    from tide_operator.adapters.calibration_sweep import SweepSettings, run_sweep

    if not args.control_url:
        raise ValueError("--endpoint needs --control-url (the plugin's speculation switch)")
    token = args.token_file.read_text().strip() if args.token_file else os.environ.get(sc.CONTROL_TOKEN_ENV, "")
    settings = SweepSettings(concurrencies=tuple(int(b) for b in args.concurrency.split(",")),
                             output_tokens=args.tokens, rounds=args.rounds,
                             **({"prompts": tuple(args.prompt)} if args.prompt else {}))
    sweep = run_sweep(args.endpoint, sc.ServingControlClient(args.control_url, token, timeout_s=300), settings)
    if args.save_measurements:
        args.save_measurements.write_text(json.dumps(sweep_to_json(sweep), indent=2) + "\n")
    return sweep


def config_map(namespace: str, name: str, key: str, points: list[dict[str, int]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": {key: json.dumps({"points": points})}}


def target_ref(args: argparse.Namespace, api: Any, namespace: str) -> tuple[str, str]:
    """(ConfigMap name, key): the options, else the TideDeployment's configMapRef."""
    ref: dict[str, str] = {}
    if args.name and not (args.config_map and args.key):
        from tide_operator.cli.kube import read_tide_deployment

        spec = read_tide_deployment(api, namespace, args.name).get("spec") or {}
        ref = ((spec.get("control") or {}).get("costProfile") or {}).get("configMapRef") or {}
    name = args.config_map or ref.get("name")
    if not name:
        raise ValueError("no ConfigMap: give --config-map, or a TideDeployment whose spec.control.costProfile "
                         "has a configMapRef")
    return name, args.key or ref.get("key") or DEFAULT_KEY


def write_config_map(api: Any, manifest: dict[str, Any]) -> str:
    """Create the ConfigMap, or replace only our key in an existing one; 'created' or 'updated'."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    core = client.CoreV1Api(api)
    meta = manifest["metadata"]
    try:
        core.patch_namespaced_config_map(meta["name"], meta["namespace"], {"data": manifest["data"]})
        return "updated"
    except ApiException as err:
        if err.status != 404:
            raise
    core.create_namespaced_config_map(meta["namespace"], manifest)
    return "created"


def run_calibrate(args: argparse.Namespace, api: Any, namespace: str) -> str:
    """What to print: the ConfigMap (dry run, -o) or one line saying what was written."""
    name, key = target_ref(args, api, namespace)
    points = spec_points(cost_points(measure(args)))
    manifest = config_map(namespace, name, key, points)
    if args.output == "json":
        return json.dumps(manifest, indent=2) + "\n"
    if args.output == "yaml" or args.dry_run:
        import yaml

        return yaml.safe_dump(manifest, sort_keys=False)
    return f"ConfigMap {namespace}/{name} {write_config_map(api, manifest)}: key {key}, {len(points)} points\n"
