"""Shared pieces of the promotion scenarios: simulator scenario, operator config, seed draft, spec, probes.

The vLLM pods run the simulator (acceptance per draft version and traffic domain from a scenario
file, shards in the trainer's format written to S3 while capture is on); the trainer Job runs the
real `python -m tide_trainer train` on those shards, warm-starting from a tiny speculators draft
shaped like the simulator's capture model.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from tide_contracts.registry import DraftRegistry, FileEntry, Manifest
from tide_contracts.serving_control import DEFAULT_CONTROL_PORT, ServingControlClient, ServingControlError
from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_e2e.sim_draft import CAPTURE, TRAINER_ARGS, seed_draft_files  # noqa: F401 (re-exported to the tests)
from tide_operator.api import GROUP, PLURAL, VERSION
from tide_operator.control.lifecycle import run_id_for

REVISION = "r1"
def scenario(domain: str, acceptance: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {"seed": 5, "acceptance": acceptance, "capture": CAPTURE,
            "timeline": [{"at_s": 0, "domain": domain, "background_running": 4}]}


def sim_operator_config(scenario_file: Path, **serving: Any) -> dict[str, Any]:
    """Short intervals and windows; the simulator as the serving command (more serving settings may follow)."""
    return {"resyncIntervalSeconds": 2, "prometheusWindowSeconds": 8, "prometheusIntervalSeconds": 2,
            "capturePruneIntervalSeconds": 2,
            # The readiness-following clients here see a deleted pod within 0.3 s: a short preStop will do.
            "serving": {"command": [sys.executable, "-m", "tide_vllm_sim", "--sim-scenario", str(scenario_file)],
                        "preStopSleepSeconds": 2, **serving}}


def operator_config(scenario_file: Path, work: Path) -> dict[str, Any]:
    """The simulator's config plus one trainer work dir per run."""
    # Pods here are processes without volumes: one work dir per run, or a run resumes another's checkpoint.
    return {**sim_operator_config(scenario_file),
            "trainer": {"workDir": f"{work}/{{namespace}}/{{name}}/{{run_id}}", "extraArgs": TRAINER_ARGS}}


@contextmanager
def simulated_operator(plane: Any, kube: Any, scenario_file: Path, work: Path) -> Iterator[OperatorProcess]:
    """A module's operator on the simulator's config (its CRD and RBAC installed first), stopped at the end:
    the one it runs then, should a test have restarted it."""
    install_crd(kube)
    grant_operator_rbac(kube)
    process = OperatorProcess(plane, operator_config(scenario_file, work)).start()
    try:
        yield process
    finally:
        process.stop()


def upload(s3: Any, bucket: str, prefix: str, files: list[Path]) -> None:
    for f in files:
        s3.put_object(Bucket=bucket, Key=f"{prefix}/{f.name}", Body=f.read_bytes())


def promote_seed(s3: Any, bucket: str, prefix: str, files: list[Path], run: str = "seed") -> None:
    """A promoted draft (v1, then v2, ...) in the registry before the deployment starts (the operator's own
    registry code)."""
    upload(s3, bucket, f"{prefix}/candidates/{run}", files)
    manifest = Manifest(kind="candidate", run_id=run, created_at=datetime.now(UTC).isoformat(),
                        target_revision=REVISION, eval={"candidate_acceptance_length": 2.0},
                        files={f.name: FileEntry(sha256=hashlib.sha256(f.read_bytes()).hexdigest(),
                                                 bytes=f.stat().st_size) for f in files})
    s3.put_object(Bucket=bucket, Key=f"{prefix}/candidates/{run}/manifest.json",
                  Body=manifest.model_dump_json().encode())
    DraftRegistry(s3, bucket, prefix).promote(run, target_revision=REVISION, tokenizer_hash=None,
                                               now=datetime.now(UTC), reason=run)


def spec(bucket: str, endpoint: str, control: dict[str, Any] | None = None) -> dict[str, Any]:
    """The promotion scenarios' spec; ``control`` overrides spec.control one section at a time."""
    body: dict[str, Any] = {
        "target": {"model": "tide-local/tiny", "revision": REVISION, "servedModelName": "chat"},
        "draft": {"method": "eagle3", "initial": f"s3://{bucket}/seed-draft", "numSpeculativeTokens": 3},
        "inference": {"replicas": 2, "gpusPerReplica": 1},
        "control": {
            "interval": "5s", "decision": {"minDwell": "6s"}, "adaptiveSpeculativeTokens": False,
            "drift": {"shortHalfLife": "5s", "longHalfLife": "60s", "thresholdPercent": 5, "minSamples": 200},
            "capture": {"enabled": False, "samplingPercent": 20},
            "training": {"sampleThreshold": 40, "backoff": "10s"},
            "canary": {"replicas": 1, "analysisWindow": "30s", "minAcceptanceLengthGainPercent": 2,
                       "minPromotionInterval": "0s"},
        },
        "storage": {"s3": {"bucket": bucket, "endpoint": endpoint, "region": "us-east-1",
                           "credentialsSecret": "s3-creds"}},
    }
    for section, values in (control or {}).items():
        body["control"][section] = {**body["control"].get(section, {}), **values}
    return body


def create(kube: Any, namespace: str, body: dict[str, Any]) -> None:
    client.CoreV1Api(kube).create_namespaced_secret(namespace, {
        "metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}})
    client.CustomObjectsApi(kube).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TideDeployment", "metadata": {"name": "chat"},
        "spec": copy.deepcopy(body)})


def patch_spec(kube: Any, namespace: str, body: dict[str, Any]) -> None:
    client.CustomObjectsApi(kube).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat",
                                                                 {"spec": body})


def status(kube: Any, namespace: str) -> dict[str, Any]:
    return client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "chat").get("status") or {}


def lifecycle(st: dict[str, Any]) -> dict[str, Any]:
    return (st.get("controlState") or {}).get("lifecycle") or {}


def condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == kind), {})


def status_where(kube: Any, namespace: str, holds: Any) -> dict[str, Any] | None:
    """The status once its lifecycle satisfies `holds` (a pass swaps pods first, writes status last)."""
    st = status(kube, namespace)
    return st if holds(lifecycle(st)) else None


def pod_drafts(kube: Any, namespace: str) -> dict[str, str | None]:
    """Each ready serving pod's draft version, as the pod itself reports it (control route)."""
    core = client.CoreV1Api(kube)
    try:
        token = base64.b64decode(core.read_namespaced_secret("chat-control", namespace).data["token"]).decode()
    except ApiException as e:
        if e.status == 404:
            return {}  # the operator has not created it yet
        raise
    pods = core.list_namespaced_pod(namespace, label_selector="tide.dev/deployment=chat").items
    out = {}
    for p in sorted(pods, key=lambda p: p.metadata.name):
        if p.status.pod_ip and not p.metadata.deletion_timestamp:
            try:
                draft = ServingControlClient(f"http://{p.status.pod_ip}:{DEFAULT_CONTROL_PORT}", token).status().draft
            except (ServingControlError, OSError):
                continue  # not answering yet
            out[p.metadata.name] = draft.version if draft else None
    return out


def events(kube: Any, namespace: str, kind: str | None = None, reason: str | None = None) -> list[str]:
    """Messages of the deployment's Events, optionally of one type (Normal, Warning) or reason."""
    selector = "involvedObject.name=chat" + (f",type={kind}" if kind else "") + (f",reason={reason}" if reason else "")
    items = client.CoreV1Api(kube).list_namespaced_event(namespace, field_selector=selector).items
    return [e.message or "" for e in items]


def events_once(kube: Any, namespace: str, holds: Callable[[list[str]], bool], what: str,
                timeout_s: float = 20.0, kind: str | None = None) -> list[str]:
    """The Events' messages once ``holds`` them: Kopf posts Events from a queue, after the effect is visible."""
    from tests.integration.kubewait import wait_for

    found: list[list[str]] = []

    def probe() -> bool:
        found[:] = [events(kube, namespace, kind)]
        return holds(found[0])

    wait_for(probe, what, timeout_s=timeout_s)
    return found[0]


def registry_prefix(namespace: str) -> str:
    """The deployment's registry prefix in the bucket (no spec.storage.s3.prefix: <namespace>/<name>)."""
    return f"{namespace}/chat"


def history(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    objs = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/history/").get("Contents", [])
    return [json.loads(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()) for o in sorted(
        objs, key=lambda o: o["Key"])]


def keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]


def run_id(kube: Any, namespace: str, counter: int = 1) -> str:
    """The operator's id of TideDeployment chat's run `counter`: <hash of its UID>-r<counter>."""
    td = client.CustomObjectsApi(kube).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "chat")
    return run_id_for(counter, td["metadata"]["uid"])


def trainer_log(plane: Any, namespace: str, run: str) -> str:
    logs = sorted((Path(plane.state_dir) / "pods" / namespace).glob(f"chat-train-{run}-*/trainer.log"))
    return logs[0].read_text(errors="replace") if logs else "(no trainer log)"


def trained_job(kube: Any, plane: Any, namespace: str, run: str | None = None) -> Any:
    """Probe: the trainer Job of `run` (the first) once it succeeded (fails the test, with its log, if it failed)."""
    run = run or run_id(kube, namespace)
    jobs = client.BatchV1Api(kube).list_namespaced_job(namespace).items
    job = next((j for j in jobs if j.metadata.name == f"chat-train-{run}"), None)
    if job is not None and job.status.failed:
        raise AssertionError(f"trainer Job failed:\n{trainer_log(plane, namespace, run)}")
    return job if job is not None and job.status.succeeded else None
