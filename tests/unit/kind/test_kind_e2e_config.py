"""The kind e2e's files agree with each other and with the operator, checked without Docker.

The e2e itself (e2e/kind/run.sh) needs a Docker engine; these checks catch, on any machine, a kind
config whose nodes the operator would not place on, values the chart's schema refuses, a
TideDeployment the operator refuses, and infra names the other files do not point at.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tide_localcluster.nodepools import load_pools
from tide_operator.adapters.prometheus_adapter_queries import LabelNames
from tide_operator.api import KIND, parse_spec
from tide_operator.config import load_operator_config
from tide_operator.control.placement import NodeInventory, PoolRequest, choose_pools
from tide_operator.control.pod_policy import pod_policy_violations
from tide_operator.manifests import labels
from tide_operator.manifests.serving import build_serving_deployment

REPO = Path(__file__).resolve().parents[3]
KIND_DIR = REPO / "e2e" / "kind"
CHART = REPO / "charts" / "tide-operator"
# What run.sh passes with --set: the images it builds and loads.
SERVING_IMAGE = "tide.local/vllm-tide-cpu-tiny:kind-e2e"
SETS = {"image": {"repository": "tide.local/tide-operator", "tag": "kind-e2e"},
        "config": {"serving": {"image": SERVING_IMAGE}}}


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kind_e2e_{name}", KIND_DIR / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def yaml_docs(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((KIND_DIR / name).read_text()) if doc]


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = deep_merge(merged[key], value) if both_maps else value
    return merged


def kind_values() -> dict[str, Any]:
    return deep_merge(yaml.safe_load((KIND_DIR / "values.yaml").read_text()), SETS)


def tidedeployment() -> dict[str, Any]:
    return next(doc for doc in yaml_docs("tidedeployment.yaml") if doc["kind"] == KIND)


def service_url(doc: dict[str, Any]) -> tuple[str, int]:
    """(``name.namespace``, port) of a Service in infra.yaml."""
    return f"{doc['metadata']['name']}.{doc['metadata']['namespace']}", doc["spec"]["ports"][0]["port"]


def infra_service(name: str) -> tuple[str, int]:
    return service_url(next(d for d in yaml_docs("infra.yaml") if d["kind"] == "Service" and
                            d["metadata"]["name"] == name))


def workers() -> list[dict[str, Any]]:
    return [node for node in yaml.safe_load((KIND_DIR / "cluster.yaml").read_text())["nodes"]
            if node["role"] == "worker"]


def kind_nodes() -> list[NodeInventory]:
    """The kind workers as the operator's placement sees them once fake_gpus.py has run."""
    fake_gpus, pools = load_script("fake_gpus"), load_pools(KIND_DIR / "pools.yaml")
    nodes = []
    for i, node in enumerate(workers()):
        gpus = fake_gpus.extended_resources(pools, node["labels"])
        nodes.append(NodeInventory(f"worker{i}", node["labels"], {k: int(v) for k, v in gpus.items()}))
    return nodes


def test_kind_workers_carry_the_pool_labels() -> None:
    config = yaml.safe_load((KIND_DIR / "cluster.yaml").read_text())
    assert (config["kind"], config["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert [node["role"] for node in config["nodes"]].count("control-plane") == 1
    pool_label = load_script("fake_gpus").POOL_LABEL
    expected = [{pool_label: pool.name, **pool.labels}
                for pool in load_pools(KIND_DIR / "pools.yaml").pools for _ in range(pool.count)]
    assert [node["labels"] for node in workers()] == expected
    assert all(isinstance(v, str) for node in workers() for v in node["labels"].values())  # kind wants strings


def test_fake_gpus_are_the_pools_extended_resources_only() -> None:
    fake_gpus, pools = load_script("fake_gpus"), load_pools(KIND_DIR / "pools.yaml")
    advertised = [fake_gpus.extended_resources(pools, node["labels"]) for node in workers()]
    assert advertised == [{"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, {"amd.com/gpu": "4"}]
    assert fake_gpus.extended_resources(pools, {"kubernetes.io/hostname": "control-plane"}) == {}
    patch = fake_gpus.status_patch({"amd.com/gpu": "4"})
    assert patch == {"status": {"capacity": {"amd.com/gpu": "4"}, "allocatable": {"amd.com/gpu": "4"}}}


def test_operator_places_inference_and_training_on_the_expected_kind_pools() -> None:
    spec = parse_spec(tidedeployment()["spec"])
    config = load_operator_config(kind_values()["config"])
    placement = choose_pools(kind_nodes(), config.catalog,
                             PoolRequest(None, spec.inference.replicas, spec.inference.gpus_per_replica),
                             PoolRequest(None, 1, spec.training.gpus_per_job))
    verify = load_script("verify")
    assert placement.inference.gpu_class is not None
    assert placement.training.gpu_class is not None
    assert (placement.inference.gpu_class.name, placement.training.gpu_class.name) == (
        verify.INFERENCE_CLASS, verify.TRAINING_CLASS)
    assert len(placement.inference.nodes) == 2  # both H100 workers have room


def test_kind_values_satisfy_the_chart_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text())
    chart_defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    # Helm checks the defaults merged with the user's values; the user's alone must pass too.
    for values in (kind_values(), deep_merge(chart_defaults, kind_values())):
        jsonschema.Draft202012Validator(schema).validate(values)
    config = load_operator_config(kind_values()["config"])
    assert config.serving.image == SERVING_IMAGE
    assert urlsplit(config.prometheus_url).netloc == "{}:{}".format(*infra_service("prometheus"))


def test_chart_renders_with_the_kind_values() -> None:
    helm_python = pytest.importorskip("helm_python")
    rendered = helm_python.Chart.load(str(CHART)).render(kind_values(), name="tide-operator",
                                                         namespace="tide-system", is_install=True)
    objects = [doc for path, text in rendered.items() if not path.endswith(".txt")
               for doc in yaml.safe_load_all(text) if doc]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == ("tide.local/tide-operator:kind-e2e", "Never")
    configmap = next(o for o in objects if o["kind"] == "ConfigMap")
    assert load_operator_config(yaml.safe_load(configmap["data"]["config.yaml"])).serving.image == SERVING_IMAGE


def test_tidedeployment_validates_and_points_at_the_infra_and_the_baked_model() -> None:
    from tide_serving.testing.tiny_models import TARGET_REVISION

    body = tidedeployment()
    config = load_operator_config(kind_values()["config"])
    spec = parse_spec(body["spec"], config.catalog.names())
    assert pod_policy_violations(spec, config) == []  # its CPU env override is one the policy admits
    s3 = spec.storage.s3
    assert s3.endpoint is not None
    assert urlsplit(s3.endpoint).netloc == "{}:{}".format(*infra_service("s3"))
    secret = next(doc for doc in yaml_docs("tidedeployment.yaml") if doc["kind"] == "Secret")
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == (s3.credentials_secret,
                                                                             body["metadata"]["namespace"])
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    bake = load_script("bake_tiny_models")
    assert (spec.target.model, spec.draft.initial) == (f"/models/{bake.TARGET_DIR}", f"/models/{bake.DRAFT_DIR}")
    assert spec.target.revision == TARGET_REVISION


def serving_deployment() -> dict[str, Any]:
    body, config = tidedeployment(), load_operator_config(kind_values()["config"])
    spec = parse_spec(body["spec"])
    placement = choose_pools(kind_nodes(), config.catalog, PoolRequest(None, 2, 1), PoolRequest(None, 1, 1))
    return build_serving_deployment(body["metadata"]["name"], body["metadata"]["namespace"], spec, placement, config)


def test_vllm_pods_run_the_cpu_image_with_the_cpu_settings() -> None:
    pod = serving_deployment()["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["image"] == SERVING_IMAGE
    assert container["command"] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    args = container["args"]
    assert args[args.index("--model") + 1] == "/models/tiny-llama"
    assert json.loads(args[args.index("--speculative-config") + 1])["model"] == "/models/tiny-llama-eagle3"
    env = {e["name"]: e.get("value") for e in container["env"]}
    # podTemplateOverride merged into the operator's env, which it keeps (control token, S3, plugin).
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_CPU_OMP_THREADS_BIND"]) == ("1", "nobind")
    assert {"TIDE_CONTROL_TOKEN_FILE", "TIDE_CONTROL_PORT", "AWS_ENDPOINT_URL", "VLLM_PLUGINS"} <= set(env)
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"  # what infra.yaml's Prometheus keeps


def test_prometheus_labels_are_the_ones_the_operator_queries() -> None:
    configmap = next(d for d in yaml_docs("infra.yaml") if d["kind"] == "ConfigMap")
    relabels = yaml.safe_load(configmap["data"]["prometheus.yml"])["scrape_configs"][0]["relabel_configs"]
    targets = {r["target_label"]: r["source_labels"] for r in relabels if "target_label" in r}
    names = LabelNames()
    pod_label = "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9]", "_", labels.DEPLOYMENT_LABEL)
    assert targets[names.deployment] == [pod_label]
    assert targets[names.namespace] == ["__meta_kubernetes_namespace"]
    assert targets[names.pod] == ["__meta_kubernetes_pod_name"]


def test_verify_flags_pods_off_the_inference_class_or_not_ready() -> None:
    verify = load_script("verify")
    nodes = {node.name: node.labels for node in kind_nodes()}  # worker0, worker1: H100; worker2: MI250
    config = load_operator_config(kind_values()["config"])

    def pod(name: str, node: str, gpus: int = 1, ready: str = "True") -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}

    pods = [pod("ok", "worker0"), pod("on-mi250", "worker2"), pod("two-gpus", "worker1", gpus=2),
            pod("starting", "worker1", ready="False")]
    wrong = verify.misplaced_pods(pods, nodes, config.catalog, verify.INFERENCE_CLASS)
    assert [w.split()[0] for w in wrong] == ["on-mi250", "two-gpus", "starting"]


def test_traffic_job_runs_the_serving_image_where_it_is_loaded() -> None:
    template = serving_deployment()["spec"]["template"]
    job = load_script("verify").traffic_job("chat-traffic", template, "http://chat-vllm.llm:8000", "chat", 60)
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == SERVING_IMAGE
    assert pod["affinity"] == template["spec"]["affinity"]  # the H100 nodes, where run.sh loads the image
    compile(pod["containers"][0]["command"][2], "traffic", "exec")  # the inline script is valid Python


SCRIPTS = [KIND_DIR / "run.sh", REPO / "hack" / "build-images.sh"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_pass_shellcheck(script: Path) -> None:
    result = subprocess.run(["shellcheck", str(script)], check=False, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def copied_sources(dockerfile: Path) -> list[str]:
    """Every source of every COPY (the last word is the destination)."""
    return [src.rstrip("/") for line in dockerfile.read_text().splitlines()
            if line.startswith("COPY ") and "--from" not in line for src in line.split()[1:-1]]


def test_dockerfile_sources_are_in_their_build_context() -> None:
    tiny = KIND_DIR / "serving-tiny.Dockerfile"  # built with e2e/kind as the context
    assert copied_sources(tiny)
    assert all((KIND_DIR / src).exists() for src in copied_sources(tiny))
    cpu = REPO / "images" / "serving-cpu.Dockerfile"  # built from the repository root
    kept = {line[1:].rstrip("/") for line in Path(f"{cpu}.dockerignore").read_text().splitlines()
            if line.startswith("!")}
    assert copied_sources(cpu)
    assert all((REPO / src).exists() and src in kept for src in copied_sources(cpu))


def test_verify_queries_prometheus_through_the_api_server_proxy() -> None:
    """The query goes to infra.yaml's Prometheus Service via the API server (no port-forward needed)."""
    import http.server
    import threading

    from kubernetes import client

    seen: list[str] = []

    class FakeApiServer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                {"metric": {"pod": "chat-vllm-0"}, "value": [0, "1"]}]}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{server.server_port}"))
        prometheus_url = load_operator_config(kind_values()["config"]).prometheus_url
        check = load_script("verify").Check(api, tidedeployment(), prometheus_url)
        result = check.prometheus('tide_speculation_enabled{label_tide_dev_deployment="chat"} == 1')
    finally:
        server.shutdown()
    assert result == [{"metric": {"pod": "chat-vllm-0"}, "value": [0, "1"]}]
    path, _, query = seen[0].partition("?")
    assert path == "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query"
    assert query.startswith("query=tide_speculation_enabled")
