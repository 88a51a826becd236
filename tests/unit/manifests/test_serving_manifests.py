from __future__ import annotations

import json

import pytest
from manifest_fixtures import env_map, placement, spec_with

from tide_operator.api.extra_args import denied_flag
from tide_operator.config import OperatorConfig, ServingConfig
from tide_operator.control.placement import Placement, PoolChoice
from tide_operator.control.pod_policy import pod_policy_violations
from tide_operator.manifests.fingerprint import SPEC_HASH_ANNOTATION, stable_hash
from tide_operator.manifests.serving import (
    LAUNCH_BANDS_ANNOTATION,
    OFF_BANDS,
    build_service,
    build_serving_configmap,
    build_serving_deployment,
    launch_bands_of,
    render_serving_config,
)

CONFIG = OperatorConfig()


def _deployment(spec=None, where=None, config=CONFIG, **kwargs):
    return build_serving_deployment("chat", "llm", spec or spec_with(), where or placement(), config, **kwargs)


def _container(deployment):
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_identity_labels_selector_and_replicas() -> None:
    deployment = _deployment()
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    assert deployment["metadata"]["name"] == "chat-vllm"
    assert deployment["metadata"]["namespace"] == "llm"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": "chat",
        "app.kubernetes.io/component": "inference",
        "app.kubernetes.io/managed-by": "tide-operator",
        "tide.dev/deployment": "chat",
        "tide.dev/gpu-class": "H100",
    }
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    assert "tide.dev/gpu-class" not in selector  # selectors are immutable; the class may change
    assert deployment["spec"]["replicas"] == 2
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
    }


def test_vllm_command_line() -> None:
    container = _container(_deployment())
    assert container["image"] == CONFIG.serving.image
    assert container["command"] == ["python", "-m", "vllm.entrypoints.openai.api_server"]
    args = container["args"]
    assert _arg(args, "--model") == "s3://models/llama-3.3-70b"
    assert _arg(args, "--load-format") == "runai_streamer"
    assert "--revision" not in args  # a revision means nothing to vLLM for s3:// models
    assert _arg(args, "--served-model-name") == "chat"
    assert _arg(args, "--tensor-parallel-size") == "4"
    assert _arg(args, "--host") == "$(POD_IP)"
    assert _arg(args, "--port") == "8000"
    assert _arg(args, "--worker-extension-cls") == CONFIG.serving.worker_extension_cls
    assert json.loads(_arg(args, "--speculative-config")) == {
        "method": "eagle3",
        "model": "s3://drafts/llama/eagle3-base",
        "num_speculative_tokens": 3,
        "draft_load_config": {"load_format": "runai_streamer"},
    }


def test_hub_model_gets_its_revision_and_default_served_name() -> None:
    spec = spec_with(
        target={
            "model": "meta-llama/Llama-3.1-8B",
            "revision": "0e9e39f",
            "servedModelName": None,
            "tensorParallelSize": 1,
            "tokenizer": "meta-llama/Llama-3.1-8B-Instruct",
        },
        draft={"initial": "/models/draft"},
    )
    spec = spec.model_copy(update={"target": spec.target.model_copy(update={"served_model_name": None})})
    args = _container(_deployment(spec))["args"]
    assert _arg(args, "--revision") == "0e9e39f"
    assert "--load-format" not in args
    assert _arg(args, "--tokenizer") == "meta-llama/Llama-3.1-8B-Instruct"
    assert _arg(args, "--served-model-name") == "chat"
    assert "draft_load_config" not in json.loads(_arg(args, "--speculative-config"))


def test_without_a_draft_there_is_no_speculative_config_until_a_bootstrap_draft() -> None:
    spec = spec_with()
    spec = spec.model_copy(update={"draft": spec.draft.model_copy(update={"initial": None})})
    args = _container(_deployment(spec))["args"]
    assert "--speculative-config" not in args
    assert "--scheduler-cls" not in args
    args = _container(_deployment(spec, bootstrap_draft="s3://tide/llm/chat/drafts/v1"))["args"]
    assert json.loads(_arg(args, "--speculative-config"))["model"] == "s3://tide/llm/chat/drafts/v1"
    assert _arg(args, "--scheduler-cls") == CONFIG.serving.scheduler_cls


def test_extra_args_come_last_and_never_set_owned_flags() -> None:
    spec = spec_with(inference={"extraArgs": ["--max-model-len", "16384", "--enable-prefix-caching"]})
    args = _container(_deployment(spec))["args"]
    assert args[-3:] == ["--max-model-len", "16384", "--enable-prefix-caching"]
    owned = [arg for arg in args[:-3] if arg.startswith("-")]
    assert all(denied_flag(arg) for arg in owned)  # everything before extraArgs is operator-owned


def test_environment() -> None:
    env = env_map(_container(_deployment()))
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["TIDE_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert env["AWS_ENDPOINT_URL"] == "http://minio.storage:9000"
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] == "0"
    # The token is a mounted file the plugin re-reads (rotation without restarts), never an env value.
    assert "TIDE_CONTROL_TOKEN" not in env
    assert env["TIDE_CONTROL_TOKEN_FILE"] == "/var/run/tide/control/token"
    assert env["TIDE_CONTROL_PORT"] == "8081"
    assert env["TIDE_TARGET_REVISION"] == "5f1c0e2"
    assert env["TIDE_REGISTRY_URI"] == "s3://tide/llm/chat"
    assert env["TIDE_CAPTURE_URI"] == "s3://tide/llm/chat/captures/"
    assert env["VLLM_PLUGINS"] == "tide_control"
    assert "TIDE_DRAFT_VERSION" not in env


def test_service_account_storage_has_no_key_env() -> None:
    spec = spec_with(storage={"s3": {"bucket": "tide"}})
    env = env_map(_container(_deployment(spec)))
    assert not {"AWS_ACCESS_KEY_ID", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"} & env.keys()
    assert env["TIDE_REGISTRY_URI"] == "s3://tide/llm/chat"  # default prefix: <namespace>/<name>


def test_switching_capture_off_in_the_spec_changes_no_pod_template() -> None:
    """Capture is a runtime switch: the spec toggle must not restart pods (nor leave an env var that a
    strategic merge patch cannot remove, which made every pass patch the Deployment again)."""
    on, off = (_deployment(spec_with(control={"capture": {"enabled": enabled}})) for enabled in (True, False))
    assert on["spec"]["template"] == off["spec"]["template"]
    assert env_map(_container(off))["TIDE_CAPTURE_URI"] == "s3://tide/llm/chat/captures/"


def test_probe_port_and_shared_memory() -> None:
    deployment = _deployment(spec_with(inference={"port": 8080}))
    container = _container(deployment)
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                                  {"name": "tide-control", "containerPort": 8081, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    # A dead engine (503) is restarted, a loaded one (slow answers) is not, loading has its own budget.
    startup, liveness = container["startupProbe"], container["livenessProbe"]
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 60
    assert liveness["timeoutSeconds"] > container["readinessProbe"]["timeoutSeconds"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert container["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "control-token", "mountPath": "/var/run/tide/control", "readOnly": True}]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert volumes == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
                       {"name": "control-token", "secret": {"secretName": "chat-control", "defaultMode": 0o444}}]


@pytest.mark.parametrize(
    ("gpu_class", "resource", "label_key", "values"),
    [
        (
            "H100",
            "nvidia.com/gpu",
            "nvidia.com/gpu.product",
            ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"],
        ),
        ("MI300X", "amd.com/gpu", "amd.com/gpu.device-id", ["74a1"]),
    ],
)
def test_affinity_and_gpu_resources_follow_the_class(gpu_class, resource, label_key, values) -> None:
    deployment = _deployment(where=placement(inference=gpu_class))
    pod = deployment["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0] == {"matchExpressions": [{"key": label_key, "operator": "In", "values": values}]}
    assert _container(deployment)["resources"] == {"limits": {resource: 4}}


def test_scheduling_overrides() -> None:
    spec = spec_with(
        inference={
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "llm-serving",
            "serviceAccountName": "chat-vllm",
            "image": "my/vllm:1",
            "resources": {
                "requests": {"cpu": 16, "memory": "256Gi", "nvidia.com/gpu": 1},
                "limits": {"memory": "300Gi", "nvidia.com/gpu": 1},
            },
        }
    )
    deployment = _deployment(spec)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert (pod["priorityClassName"], pod["serviceAccountName"]) == ("llm-serving", "chat-vllm")
    container = _container(deployment)
    assert container["image"] == "my/vllm:1"
    assert container["resources"] == {
        "requests": {"cpu": 16, "memory": "256Gi"},
        "limits": {"memory": "300Gi", "nvidia.com/gpu": 4},
    }


def test_pod_template_override_is_merged_last() -> None:
    override = {
        "metadata": {"annotations": {"team": "llm", "prometheus.io/path": None}},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "env": [
                        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
                        {"name": "VLLM_PLUGINS", "value": "tide_control,other"},
                    ],
                },
                {"name": "sidecar", "image": "busybox"},
            ],
            "tolerations": [{"operator": "Exists"}],
            "hostIPC": True,
        },
    }
    spec = spec_with(inference={"podTemplateOverride": override, "tolerations": [{"key": "a", "operator": "Exists"}]})
    deployment = _deployment(spec)
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["team"] == "llm"
    assert "prometheus.io/path" not in template["metadata"]["annotations"]
    containers = template["spec"]["containers"]
    assert [container["name"] for container in containers] == ["vllm", "sidecar"]
    env = env_map(containers[0])
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert env["VLLM_PLUGINS"] == "tide_control,other"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}  # built env kept
    assert "--model" in containers[0]["args"]
    assert template["spec"]["tolerations"] == [{"operator": "Exists"}]  # unnamed lists are replaced
    assert template["spec"]["hostIPC"] is True
    # The builder merges mechanically; the pod policy is what refuses this spec before it is built,
    # and the restricted security contexts are re-asserted on every container after the merge.
    refused = {field for field, _ in pod_policy_violations(spec, CONFIG)}
    assert {"spec.inference.podTemplateOverride.spec.hostIPC",
            "spec.inference.podTemplateOverride.spec.containers[1]"} <= refused
    assert containers[1]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_template_depends_only_on_spec_placement_and_config() -> None:
    # No draft version and no clock: a hot swap or promotion (status only) never rolls the pods.
    spec = spec_with()
    first = _deployment(spec)
    assert _deployment(spec)["spec"]["template"] == first["spec"]["template"]
    assert "TIDE_DRAFT_VERSION" not in env_map(_container(first))


def test_hash_annotation_tracks_the_template_not_the_replicas() -> None:
    two, three = _deployment(spec_with()), _deployment(spec_with(inference={"replicas": 3}))
    assert two["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == stable_hash(two["spec"]["template"])
    assert two["metadata"]["annotations"] == three["metadata"]["annotations"]
    other = _deployment(spec_with(inference={"extraArgs": ["--max-num-seqs", "8"]}))
    assert other["metadata"]["annotations"] != two["metadata"]["annotations"]


def test_serving_config_from_operator_config() -> None:
    config = OperatorConfig(
        serving=ServingConfig(image="x/y:z", worker_extension_cls=None, vllm_plugins=None, command=("vllm-sim",))
    )
    container = _container(_deployment(config=config))
    assert container["image"] == "x/y:z"
    assert container["command"] == ["vllm-sim"]
    assert "--worker-extension-cls" not in container["args"]
    assert "VLLM_PLUGINS" not in env_map(container)


def test_no_inference_class_is_an_error() -> None:
    nowhere = Placement(PoolChoice(None, "NoMatchingGPUNodes", "no nodes"), PoolChoice(None, "x", "y"))
    with pytest.raises(ValueError, match="no nodes"):
        _deployment(where=nowhere)


def test_service() -> None:
    service = build_service("chat", "llm", spec_with(inference={"port": 8080}))
    assert service["metadata"]["name"] == "chat-vllm"
    assert service["spec"]["selector"] == _deployment()["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    assert service["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tide-operator"


def test_configmap_holds_the_rendered_serving_config() -> None:
    spec = spec_with()
    configmap = build_serving_configmap("chat", "llm", spec)
    assert configmap["metadata"]["name"] == "chat-serving"
    rendered = json.loads(configmap["data"]["serving.json"])
    assert rendered == json.loads(json.dumps(render_serving_config("chat", "llm", spec)))
    assert rendered["speculativeConfig"]["num_speculative_tokens"] == 3
    assert rendered["captureUri"] == "s3://tide/llm/chat/captures/"


def test_pods_rolled_with_launch_bands_carry_them_in_the_speculative_config_and_an_annotation() -> None:
    plain, off = _deployment(), _deployment(launch_bands=OFF_BANDS)
    assert launch_bands_of(plain) is None  # "" on every Deployment, so going back removes nothing by patch
    assert plain["metadata"]["annotations"][LAUNCH_BANDS_ANNOTATION] == ""
    assert launch_bands_of(off) == OFF_BANDS
    config = json.loads(_arg(_container(off)["args"], "--speculative-config"))
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 1 << 20, 0]]
    assert "num_speculative_tokens_per_batch_size" not in json.loads(_arg(_container(plain)["args"],
                                                                           "--speculative-config"))
    assert off["spec"]["template"] != plain["spec"]["template"]  # a new template: the pods roll
    assert launch_bands_of({"metadata": {"annotations": {LAUNCH_BANDS_ANNOTATION: "[[1, 4"}}}) is None


def test_a_deleted_pod_keeps_serving_briefly_then_drains_what_it_has() -> None:
    """A scale-down, a rollout or a retiring serving group deletes pods: a preStop sleep lets endpoints
    drop the pod first, vLLM's --shutdown-timeout lets requests in flight finish, and the grace period
    holds both (vLLM's own default aborts them)."""
    deployment = _deployment()
    container = _container(deployment)
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", "5"]}}}
    assert _arg(container["args"], "--shutdown-timeout") == "20"
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 35
    assert denied_flag("--shutdown-timeout=0") == "--shutdown-timeout"  # the grace period is the operator's
    off = OperatorConfig(serving=ServingConfig(pre_stop_sleep_seconds=0, shutdown_timeout_seconds=0))
    container = _container(_deployment(config=off))
    assert "lifecycle" not in container
    assert "--shutdown-timeout" not in container["args"]
    assert _deployment(config=off)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 30
