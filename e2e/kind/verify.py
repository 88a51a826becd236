"""The kind e2e's assertions, run by run.sh once the chart, infra.yaml and tidedeployment.yaml are applied.

What a chart user would check by hand, through the kubernetes client:
1. the TideDeployment becomes Ready, with pools chosen from node labels (H100 serves, MI250 trains);
2. every vLLM pod is Ready on a node of the inference class and holds one (fake) GPU;
3. under traffic, the control loop measures the draft through Prometheus and keeps speculation on
   (status.speculation, SpeculationEnabled, Degraded=False: Prometheus and S3 both answer), says so
   in an Event, and reports Collecting and Training off (capture is off in this scenario);
4. Prometheus, scraping the pods like the chart's PodMonitor, sees speculation on in every pod.

Exits non-zero with what was last seen when an expectation is not met in time.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

from tide_contracts.serving_control import METRIC_PLUGIN_INFO, METRIC_SPECULATION_ENABLED
from tide_operator.api import GROUP, KIND, PLURAL, VERSION
from tide_operator.config import load_operator_config
from tide_operator.manifests import labels, names

HERE = Path(__file__).parent
INFERENCE_CLASS, TRAINING_CLASS = "H100", "MI250"  # what placement picks from pools.yaml's nodes
T = TypeVar("T")
STARTED = time.monotonic()


def say(text: str) -> None:
    print(f"[verify {time.monotonic() - STARTED:5.0f}s] {text}", flush=True)


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float, interval_s: float = 3) -> T:
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last seen: {last!r}")


def condition(status: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def misplaced_pods(pods: list[dict[str, Any]], node_labels: Mapping[str, Mapping[str, str]],
                   catalog: Any, gpu_class: str) -> list[str]:
    """Pods that are not Ready on a node of ``gpu_class`` holding exactly one of its GPUs, and why."""
    wrong = []
    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
        found = catalog.class_of(node_labels.get(node, {})) if node else None
        limits = pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        ready = condition(pod.get("status") or {}, "Ready").get("status") == "True"
        if found is None or found.name != gpu_class:
            wrong.append(f"{name} on {node} ({found.name if found else 'no GPU class'})")
        elif str(limits.get(found.resource_name)) != "1":
            wrong.append(f"{name} limits {limits}, not one {found.resource_name}")
        elif not ready:
            wrong.append(f"{name} not Ready")
    return wrong


def traffic_job(name: str, template: Mapping[str, Any], url: str, model: str, seconds: int) -> dict[str, Any]:
    """A Job sending completions to the vLLM Service; it runs the serving image where it is loaded."""
    container = template["spec"]["containers"][0]
    script = (
        "import json, os, threading, time, urllib.request\n"
        "end = time.time() + float(os.environ['SECONDS_TOTAL'])\n"
        "def worker(seed):\n"
        "    i = seed\n"
        "    while time.time() < end:\n"
        "        prompt = ' '.join(f'w{3 + (i * 31 + k * 7) % 509}' for k in range(8))  # the tiny vocab\n"
        "        body = {'model': os.environ['MODEL'], 'prompt': prompt, 'max_tokens': 48,\n"
        "                'temperature': 0, 'ignore_eos': True}\n"
        "        req = urllib.request.Request(os.environ['URL'] + '/v1/completions', json.dumps(body).encode(),\n"
        "                                     {'Content-Type': 'application/json'})\n"
        "        try:\n"
        "            urllib.request.urlopen(req, timeout=120).read()\n"
        "        except OSError as e:\n"
        "            print('request failed:', e, flush=True)\n"
        "            time.sleep(1)\n"
        "        i += 1\n"
        "threads = [threading.Thread(target=worker, args=(s,)) for s in range(2)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
    )
    env = {"URL": url, "MODEL": model, "SECONDS_TOTAL": str(seconds)}
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": seconds + 300, "template": {"spec": {
            "restartPolicy": "Never",
            "affinity": template["spec"].get("affinity"),  # the nodes the serving image was loaded on
            "containers": [{"name": "traffic", "image": container["image"], "command": ["python", "-c", script],
                            "env": [{"name": k, "value": v} for k, v in env.items()]}]}}},
    }


class Check:
    def __init__(self, api: Any, manifest: dict[str, Any], prometheus_url: str) -> None:
        from kubernetes import client

        self.api, self.manifest = api, manifest
        self.core, self.apps, self.batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
        self.objects = client.CustomObjectsApi(api)
        self.ns, self.name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
        host = urlsplit(prometheus_url)
        service, namespace = (host.hostname or "").split(".")[:2]
        self.prometheus_proxy = f"/api/v1/namespaces/{namespace}/services/{service}:{host.port}/proxy"
        self._last = ""

    def status(self) -> dict[str, Any]:
        body = self.objects.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, self.name)
        status = body.get("status") or {}
        line = " ".join(f"{c['type']}={c['status']}({c['reason']})" for c in status.get("conditions", []))
        line = f"phase={status.get('phase', '-')} {line} speculation={status.get('speculation')}"
        if line != self._last:
            say("status: " + line)
            self._last = line
        return status

    def ready(self, timeout_s: float) -> dict[str, Any]:
        def is_ready() -> dict[str, Any] | None:
            status = self.status()
            return status if condition(status, "Ready").get("status") == "True" else None

        status = wait_for(is_ready, "Ready=True (vLLM on CPU starts in a minute or two)", timeout_s)
        assert status["phase"] == "Serving", status["phase"]
        assert condition(status, "Scheduled").get("reason") == "PoolsChosen", condition(status, "Scheduled")
        assert status["inferencePool"]["gpuClass"] == INFERENCE_CLASS, status["inferencePool"]
        assert status["trainingPool"]["gpuClass"] == TRAINING_CLASS, status["trainingPool"]
        say(f"Ready: inference on {INFERENCE_CLASS}, training pool {TRAINING_CLASS}")
        return status

    def pods_placed(self, catalog: Any) -> None:
        found = self.core.list_namespaced_pod(self.ns, label_selector=labels.serving_selector(self.name)).items
        pods = [self.api.sanitize_for_serialization(p) for p in found]
        nodes = {n.metadata.name: n.metadata.labels or {} for n in self.core.list_node().items}
        assert len(pods) == self.manifest["spec"]["inference"]["replicas"], [p["metadata"]["name"] for p in pods]
        wrong = misplaced_pods(pods, nodes, catalog, INFERENCE_CLASS)
        assert not wrong, f"vLLM pods not where placement put them: {wrong}"
        say("vLLM pods Ready on " + ", ".join(sorted({p["spec"]["nodeName"] for p in pods})))

    def start_traffic(self, seconds: int) -> None:
        deployment = self.apps.read_namespaced_deployment(names.serving_name(self.name), self.ns)
        template = self.api.sanitize_for_serialization(deployment.spec.template)
        spec = self.manifest["spec"]
        url = f"http://{names.serving_name(self.name)}.{self.ns}:{spec['inference'].get('port', 8000)}"
        job = traffic_job(f"{self.name}-traffic", template, url, spec["target"]["servedModelName"], seconds)
        self.batch.create_namespaced_job(self.ns, job)
        say(f"traffic: 2 clients for {seconds}s against {url}")

    def speculating(self, timeout_s: float) -> dict[str, Any]:
        def measured_on() -> dict[str, Any] | None:
            status = self.status()
            speculation = status.get("speculation") or {}
            on = speculation.get("enabled") is True and speculation.get("modelledSpeedupPercent") is not None
            return status if on and condition(status, "SpeculationEnabled").get("status") == "True" else None

        status = wait_for(measured_on, "speculation on with a measured acceptance", timeout_s)
        speculation = status["speculation"]
        assert condition(status, "Degraded").get("status") == "False", condition(status, "Degraded")
        # Capture is off in this scenario, so the rest of the loop reports itself idle.
        assert condition(status, "Collecting").get("reason") == "CaptureDisabled", condition(status, "Collecting")
        assert condition(status, "Training").get("status") == "False", condition(status, "Training")
        # The baked draft is right at the first position (tiny_models): about 2 tokens per step.
        assert speculation["acceptanceLengthMilli"] > 1500, speculation
        assert speculation["modelledSpeedupPercent"] > 100, speculation
        say(f"speculation on: acceptance length {speculation['acceptanceLengthMilli'] / 1000:.2f}, "
            f"modelled speedup {speculation['modelledSpeedupPercent'] / 100:.2f}x")
        return status

    def events(self, timeout_s: float) -> None:
        # Kopf posts Events from a queue after the pass, so the SetSpeculation Event can trail the status.
        selector = f"involvedObject.name={self.name},involvedObject.kind={KIND}"

        def listed() -> list[Any] | None:
            items = self.core.list_namespaced_event(self.ns, field_selector=selector).items
            return items if any((e.message or "").startswith("SetSpeculation") for e in items) else None

        for event in wait_for(listed, "a SetSpeculation Event", timeout_s):
            say(f"event {event.type} {event.reason}: {event.message}")

    def prometheus(self, promql: str) -> list[dict[str, Any]]:
        response = self.api.call_api(f"{self.prometheus_proxy}/api/v1/query", "GET",
                                     query_params=[("query", promql)], header_params={"Accept": "application/json"},
                                     auth_settings=["BearerToken"], _preload_content=False,
                                     _return_http_data_only=True)
        return json.loads(response.data)["data"]["result"]

    def pods_in_prometheus(self, timeout_s: float) -> None:
        replicas = self.manifest["spec"]["inference"]["replicas"]
        deployment = f'label_tide_dev_deployment="{self.name}"'
        queries = {
            "plugin active": f'{METRIC_PLUGIN_INFO}{{{deployment},engine_supported="true"}}',
            "speculation on": f"{METRIC_SPECULATION_ENABLED}{{{deployment}}} == 1",
        }
        for what, promql in queries.items():
            wait_for(lambda q=promql: len(self.prometheus(q)) == replicas or None,
                     f"{what} in all {replicas} pods ({promql})", timeout_s)
        say(f"Prometheus: serving plugin active and speculation on in all {replicas} pods")


def main() -> int:
    from kubernetes import config

    manifest = next(d for d in yaml.safe_load_all((HERE / "tidedeployment.yaml").read_text()) if d["kind"] == KIND)
    operator_config = load_operator_config(yaml.safe_load((HERE / "values.yaml").read_text())["config"])
    check = Check(config.new_client_from_config(), manifest, operator_config.prometheus_url)
    check.ready(timeout_s=900)
    check.pods_placed(operator_config.catalog)
    check.start_traffic(seconds=240)
    check.speculating(timeout_s=240)
    check.events(timeout_s=60)
    check.pods_in_prometheus(timeout_s=60)
    say("all checks passed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        say(f"FAILED: {e}")
        sys.exit(1)
