"""`python -m tide_e2e.demo [--fast]`: the operator at work on a local control plane, narrated live.

Default: the whole loop with real vLLM pods on CPU and the real trainer (tide_e2e.whole_loop):
traffic shifts from code to prose, the operator detects it, captures, trains, canaries and promotes
a new draft; then `tide plot` and a summary table. About 15 minutes on 2 cores.

--fast: starts the plane (etcd, kube-apiserver, controller-manager, scheduler, fake H100/MI250/CPU nodes,
the process kubelet, Prometheus), installs the CRD and RBAC, runs the operator as its own user,
applies examples/local-tidedeployment.yaml and shows what the operator does: GPU pools chosen,
vLLM pods placed and Ready, Prometheus scraping them, speculation switched on and off as load
moves (decided from live Prometheus data), drift repaired, a bad spec refused without touching
what runs; then the loop on the stand-in: capture on, traffic shift, the real trainer Job on the
stand-in's shards, canary and promotion. Ctrl-C or the end leaves nothing running.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import boto3
import yaml
from kubernetes import client
from moto.server import ThreadedMotoServer

from tide_e2e.operator_install import OperatorProcess, grant_operator_rbac, install_crd
from tide_e2e.sim_draft import CAPTURE, TRAINER_ARGS, seed_draft_files
from tide_localcluster import binaries, plane
from tide_localcluster.client import api_client
from tide_localcluster.paths import DEFAULT_IMAGES, DEFAULT_POOLS, REPO_ROOT
from tide_operator.api import GROUP, PLURAL, VERSION

EXAMPLE = REPO_ROOT / "examples" / "local-tidedeployment.yaml"
SHOWN_CONDITIONS = ("Ready", "SpeculationEnabled", "Degraded")
ACCEPTANCE = 0.6  # the stand-in's draft: per-token acceptance on the demo's traffic
# Per draft version and traffic domain: the launch draft loses on "legal"; a draft trained on the
# shards captured after the shift (candidate r1, promoted as v1) wins it back.
ACCEPTANCE_TABLE = {"initial": {"general": ACCEPTANCE, "legal": 0.45},
                    "r1": {"general": ACCEPTANCE, "legal": 0.75}, "v1": {"general": ACCEPTANCE, "legal": 0.75}}


def traffic(background_running: int, domain: str = "general") -> dict[str, Any]:
    """The stand-in's scenario: its drafts' acceptance, the traffic domain and the load (requests running)."""
    return {"seed": 1, "acceptance": ACCEPTANCE_TABLE, "capture": CAPTURE,
            "timeline": [{"at_s": 0, "domain": domain, "background_running": background_running}]}
T = TypeVar("T")
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f}s] {text}", flush=True)


def wait(probe: Callable[[], T | None], what: str, timeout_s: float = 120) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.5)
    raise TimeoutError(f"gave up waiting for {what}")


class Demo:
    def __init__(self, info: plane.PlaneInfo, s3_endpoint: str, scenario: Path) -> None:
        self.info, self.scenario = info, scenario
        self.api = api_client(info)
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        self.objects = client.CustomObjectsApi(self.api)
        self.manifest = yaml.safe_load(EXAMPLE.read_text())
        self.manifest["spec"]["storage"]["s3"]["endpoint"] = s3_endpoint
        self.ns, self.name = self.manifest["metadata"]["namespace"], self.manifest["metadata"]["name"]
        self._last_line = ""

    def td(self) -> dict[str, Any]:
        return self.objects.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)

    def show_status(self) -> dict[str, Any]:
        status = self.td().get("status") or {}
        conditions = " ".join(f"{c['type']}={c['status']}({c['reason']})" for c in status.get("conditions", [])
                              if c["type"] in SHOWN_CONDITIONS)
        pool = status.get("inferencePool") or {}
        line = (f"phase={status.get('phase', '-')} inference={pool.get('gpuClass', '-')} "
                f"ready={pool.get('replicasReady', 0)}/{pool.get('replicas', 0)} "
                f"training={(status.get('trainingPool') or {}).get('gpuClass', '-')} | {conditions}")
        if line != self._last_line:
            say("  status: " + line)
            self._last_line = line
        return status

    def nodes(self) -> None:
        say("GPU node pools (labels as NVIDIA GPU Feature Discovery / AMD's labeller set them):")
        for node in self.core.list_node().items:
            labels, alloc = node.metadata.labels, node.status.allocatable
            product = labels.get("nvidia.com/gpu.product") or labels.get("amd.com/gpu.product-name") or "(no GPU)"
            gpus = alloc.get("nvidia.com/gpu") or alloc.get("amd.com/gpu") or "0"
            say(f"  {node.metadata.name:8s} {product:28s} GPUs={gpus}")

    def apply(self) -> None:
        self.core.create_namespace({"metadata": {"name": self.ns}})
        wait(lambda: any(sa.secrets for sa in self.core.list_namespaced_service_account(self.ns).items),
             "the namespace's service account token")
        self.core.create_namespaced_secret(self.ns, {"metadata": {"name": "s3-creds"}, "stringData": {
            "AWS_ACCESS_KEY_ID": "demo", "AWS_SECRET_ACCESS_KEY": "demo"}})
        say(f"kubectl apply -f {EXAMPLE.relative_to(REPO_ROOT)}")
        self.objects.create_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, copy.deepcopy(self.manifest))
        wait(lambda: (s := self.show_status()).get("phase") == "Serving" and s, "the TideDeployment to serve")

    def pods(self) -> None:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"tide.dev/deployment={self.name}").items
        for pod in pods:
            say(f"  pod {pod.metadata.name} on {pod.spec.node_name} at {pod.status.pod_ip} phase={pod.status.phase}")
        targets = Path(self.info.prometheus_targets)
        wait(lambda: targets.exists() and len(yaml.safe_load(targets.read_text()) or []) >= len(pods),
             "Prometheus targets for the vLLM pods", timeout_s=30)
        say(f"  Prometheus ({self.info.prometheus_url}) scrapes {len(pods)} vLLM pods via file_sd")

    def speculation(self) -> None:
        interval = self.manifest["spec"]["control"]["interval"]
        say(f"The control loop reads acceptance and load from Prometheus every {interval}:")

        def decided(enabled: bool) -> dict[str, Any] | None:
            status = self.show_status()
            spec = status.get("speculation") or {}
            return status if spec.get("enabled") is enabled and "modelledSpeedupPercent" in spec else None

        for load, enabled in ((4, True), (256, False), (4, True)):
            self.scenario.write_text(yaml.safe_dump(traffic(load)))
            status = wait(lambda e=enabled: decided(e), f"speculation {'on' if enabled else 'off'}", timeout_s=180)
            spec, last = status["speculation"], status.get("lastDecision") or {}
            say(f"  {load} requests running: speculation {'ON' if enabled else 'OFF'} "
                f"(acceptance length {spec.get('acceptanceLengthMilli', 0) / 1000:.2f}, modelled speedup "
                f"{spec['modelledSpeedupPercent'] / 100:.2f}x; {last.get('reason', '-')})")

    def loop(self) -> None:
        say("Capture is enabled (kubectl patch: control.capture.enabled=true), then traffic shifts to 'legal':")
        self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name,
                                                    {"spec": {"control": {"capture": {"enabled": True}}}})
        self.scenario.write_text(yaml.safe_dump(traffic(4, "legal")))
        seen: list[str] = []

        def promoted() -> bool:
            status = self.td().get("status") or {}
            decision = status.get("lastDecision") or {}
            line = f"{decision.get('action', '-')}: {decision.get('reason', '-')}: {decision.get('message', '')}"
            if decision and line not in seen:
                seen.append(line)
                say("  decision " + line)
            lifecycle = (status.get("controlState") or {}).get("lifecycle") or {}
            return lifecycle.get("last_promotion_at") is not None

        wait(promoted, "a promotion", timeout_s=400)
        jobs = client.BatchV1Api(self.api).list_namespaced_job(self.ns).items
        for job in jobs:
            say(f"  trainer Job {job.metadata.name}: succeeded={job.status.succeeded or 0} on the training pool")
        s3 = boto3.client("s3", endpoint_url=self.manifest["spec"]["storage"]["s3"]["endpoint"],
                          region_name="us-east-1", aws_access_key_id="demo",
                          aws_secret_access_key="demo")  # noqa: S106 (loopback moto)
        pointer = json.loads(s3.get_object(Bucket="tide", Key=f"{self.ns}/{self.name}/promoted.json")["Body"].read())
        say(f"  s3://tide/{self.ns}/{self.name}/promoted.json -> {pointer['version']} (run {pointer['run_id']})")

    def drift(self) -> None:
        say("Someone deletes the vLLM Service by hand; the operator's next pass puts it back:")
        self.core.delete_namespaced_service(f"{self.name}-vllm", self.ns)
        wait(lambda: self.core.list_namespaced_service(self.ns).items, "the Service to return")
        say("  Service restored")

    def bad_spec(self) -> None:
        before = self.apps.read_namespaced_deployment(f"{self.name}-vllm", self.ns).metadata.resource_version
        say("A bad edit (inference.gpuClasses: [TPU-v5]) is refused, naming the field; nothing running changes:")
        self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name,
                                                    {"spec": {"inference": {"gpuClasses": ["TPU-v5"]}}})
        status = wait(lambda: (s := self.show_status()).get("phase") == "Invalid" and s, "phase Invalid")
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        say(f"  Ready=False: {ready['message']}")
        after = self.apps.read_namespaced_deployment(f"{self.name}-vllm", self.ns).metadata.resource_version
        say(f"  vLLM Deployment untouched: {before == after}")
        self.objects.patch_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name,
                                                    {"spec": {"inference": {"gpuClasses": None}}})
        wait(lambda: (s := self.show_status()).get("phase") == "Serving" and s, "recovery")
        say("  fixed spec: serving again, no manual steps")


def run(state_dir: Path) -> None:
    say("Building or reusing Kubernetes v1.20.2 binaries (cached in ~/.cache/tide)")
    binaries.ensure_built()
    say("Starting etcd, kube-apiserver, controller-manager, scheduler, fake GPU nodes, process kubelet, Prometheus")
    info = plane.up(state_dir, DEFAULT_POOLS, DEFAULT_IMAGES)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    operator = None
    try:
        s3.start()
        host, port = s3.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="demo",
                     aws_secret_access_key="demo").create_bucket(Bucket="tide")  # noqa: S106 (loopback moto)
        upload_seed_draft(endpoint, state_dir / "seed-draft")
        say(f"Control plane up; KUBECONFIG={info.kubeconfig}; S3 (moto) at {endpoint}")
        scenario = state_dir / "traffic.yaml"
        scenario.write_text(yaml.safe_dump(traffic(4)))
        demo = Demo(info, endpoint, scenario)
        demo.nodes()
        install_crd(demo.api)
        grant_operator_rbac(demo.api)
        operator = OperatorProcess(info, demo_operator_config(scenario)).start()
        say(f"Operator running as user tide-operator (least-privilege ClusterRole); log: {operator.log}")
        demo.apply()
        demo.pods()
        demo.speculation()
        demo.drift()
        demo.bad_spec()
        demo.loop()
        say("Done. `make demo` runs this loop with real vLLM pods and the real trainer.")
    finally:
        if operator is not None:
            operator.stop()
        s3.stop()
        plane.down(state_dir)
        say("Everything stopped and removed.")


def demo_operator_config(scenario: Path) -> dict[str, Any]:
    """The chart's defaults, with vLLM pods running the stand-in and short windows for a short demo."""
    return {"resyncIntervalSeconds": 2, "prometheusWindowSeconds": 8, "prometheusIntervalSeconds": 2,
            "serving": {"command": [sys.executable, "-m", "tide_vllm_sim", "--sim-scenario", str(scenario)]},
            # Pods here are processes without volumes: one work dir per run, or a run resumes another's.
            "trainer": {"workDir": f"{scenario.parent}/train/{{namespace}}/{{name}}/{{run_id}}",
                        "extraArgs": TRAINER_ARGS}}


def upload_seed_draft(endpoint: str, out: Path) -> None:
    """The launch draft the trainer warm-starts from (shaped like the stand-in's capture model)."""
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="demo",
                      aws_secret_access_key="demo")  # noqa: S106 (loopback moto)
    for f in seed_draft_files(out):
        s3.put_object(Bucket="tide", Key=f"drafts/initial/{f.name}", Body=f.read_bytes())


def run_full(state_dir: Path, plot: Path, return_home: bool = False) -> None:
    """The whole loop with real vLLM pods and the real trainer (tide_e2e.whole_loop), then the plot;
    ``return_home``: code -> prose -> code, the code draft recalled from the draft pool on the return."""
    from tide_e2e.whole_loop import LoopSettings, WholeLoop, summary_table

    say("Building or reusing Kubernetes v1.20.2 binaries, the tiny target and its launch draft (cached)")
    binaries.ensure_built()
    say("Starting etcd, kube-apiserver, controller-manager, scheduler, fake GPU nodes, process kubelet, Prometheus")
    info = plane.up(state_dir, DEFAULT_POOLS, DEFAULT_IMAGES)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        s3.start()
        host, port = s3.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        for name, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo")):
            os.environ.setdefault(name, value)  # loopback moto accepts any key
        say(f"Control plane up; KUBECONFIG={info.kubeconfig}; S3 (moto) at {endpoint}")
        settings = LoopSettings(namespace="llm", return_home=return_home)
        result = WholeLoop(api_client(info), info, endpoint, settings, say=say).run()
        write_plot(info, settings.namespace, settings.name, plot)
        say("Summary:\n" + summary_table(result))
    finally:
        s3.stop()
        plane.down(state_dir)
        say("Everything stopped and removed.")


def write_plot(info: plane.PlaneInfo, namespace: str, name: str, out: Path) -> None:
    from tide_operator.cli.__main__ import main as tide

    code = tide(["plot", name, "-n", namespace, "--kubeconfig", info.kubeconfig, "--prometheus",
                 info.prometheus_url, "--since", "30m", "--out", str(out)])
    say(f"tide plot {name} -> {out.resolve()}" if code == 0 else f"tide plot failed with exit code {code}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tide-demo", description=__doc__)
    parser.add_argument("--fast", action="store_true",
                        help="simulated vLLM pods (about a minute): the operator story and speculation on/off")
    parser.add_argument("--plot", type=Path, default=Path("tide-demo.png"), help="PNG the full demo writes")
    parser.add_argument("--return-home", action="store_true",
                        help="the full demo goes code -> prose -> code: the code draft is recalled from the draft "
                             "pool on the return, with no training (about 10 minutes more)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tide-demo-") as tmp:
        try:
            if args.fast:
                run(Path(tmp) / "plane")
            else:
                run_full(Path(tmp) / "plane", args.plot, args.return_home)
        except KeyboardInterrupt:
            say("Interrupted; everything was stopped.")
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
