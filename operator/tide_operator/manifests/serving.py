"""The vLLM servers: rendered serving config, Deployment, Service and ConfigMap.

The draft VERSION a pod serves is never in the pod template: hot swap and canary change it at
runtime, and a template change would restart every pod. The template names only the launch draft
(``spec.draft.initial``, or the bootstrap draft the control loop passes once when a deployment
started without one); pods that start later load the promoted draft through TIDE_REGISTRY_URI.
"""

from __future__ import annotations

import json
from typing import Any

from tide_contracts import control_token
from tide_contracts import serving_control as sc
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.config import OperatorConfig
from tide_operator.control.actions import Bands
from tide_operator.control.placement import Placement
from tide_operator.manifests import labels, names, pod
from tide_operator.manifests.fingerprint import SPEC_HASH_ANNOTATION, stable_hash
from tide_operator.manifests.merge import merge_override

CONTAINER_NAME = "vllm"
# vLLM serves /metrics on its API port, so the one named port is also the metrics port.
PORT_NAME = "http"
SERVING_CONFIG_KEY = "serving.json"
# Keys of the per-deployment Secret (names.control_token_secret_name) the handlers create; pods
# mount it and re-read the files on change, so a rotation needs no restart.
CONTROL_AUTH_KEY = control_token.TOKEN_KEY
PREVIOUS_AUTH_KEY = control_token.PREVIOUS_TOKEN_KEY
CONTROL_TOKEN_VOLUME = "control-token"  # noqa: S105 - a volume name
# On the Deployment: the speculative tokens per batch size its pods were last rolled with (JSON bands;
# "" = the spec's table), for pods that cannot switch speculation at runtime (no plugin scheduler).
LAUNCH_BANDS_ANNOTATION = "tide.dev/launch-speculative-tokens"
# Speculation off by restart: K=0 at every batch size keeps the draft loaded and the auxiliary hidden
# states computed, so capture and hot swaps keep working (removing --speculative-config would not).
OFF_BANDS: Bands = ((1, 1 << 20, 0),)
# On the Deployment whose pods launch with the bootstrap head (`tide_trainer init`, no spec.draft.initial):
# its location. Present once the head was launched, so a later pass knows it is ready without S3.
BOOTSTRAP_DRAFT_ANNOTATION = "tide.dev/bootstrap-draft"


def full_bands(speculative_tokens: int) -> Bands:
    """K at every batch size. Pods launched with OFF_BANDS go back to K=0 when told "on, launch table",
    so speculation is switched on for them with explicit bands."""
    return ((1, 1 << 20, speculative_tokens),)


def bootstrap_draft_of(deployment: dict[str, Any] | None) -> str | None:
    """The bootstrap head a live Deployment was rolled with (None: none, or not yet)."""
    return ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(BOOTSTRAP_DRAFT_ANNOTATION) or None


def launch_bands_with(live_bands: Bands | None, bootstrap_draft: str | None,
                      live_bootstrap: str | None = None) -> Bands | None:
    """The bands the pods launch with: as last rolled; a bootstrap head starts at K=0 everywhere.

    ``live_bootstrap``: the head the live Deployment was rolled with. When the pods leave it (a
    spec.draft.initial given later, or a new target revision whose head is not written yet), its K=0
    goes with it: the spec's table again.
    """
    if live_bootstrap and not bootstrap_draft and live_bands == OFF_BANDS:
        return None
    if live_bands is not None:
        return live_bands
    return OFF_BANDS if bootstrap_draft else None


def launch_bands_of(deployment: dict[str, Any] | None) -> Bands | None:
    """The bands a live Deployment was rolled with (None: the spec's launch table)."""
    raw = ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(LAUNCH_BANDS_ANNOTATION)
    if not raw:
        return None
    try:
        return tuple((int(a), int(b), int(k)) for a, b, k in json.loads(raw))
    except (ValueError, TypeError):
        return None  # a hand-edited annotation: back to the spec's table


def is_hub_id(location: str) -> bool:
    """A Hugging Face id (``org/model``) rather than ``s3://...`` or a path in the image."""
    return "://" not in location and not location.startswith(("/", "."))


def speculative_config(spec: TideDeploymentSpec, draft_location: str,
                       launch_bands: Bands | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "method": spec.draft.method.value,
        "model": draft_location,
        "num_speculative_tokens": spec.draft.num_speculative_tokens,
    }
    if launch_bands is not None:  # pods without runtime switching: the policy's table, by restart
        config["num_speculative_tokens_per_batch_size"] = [list(band) for band in launch_bands]
    if draft_location.startswith("s3://"):
        config["draft_load_config"] = {"load_format": "runai_streamer"}
    return config


def render_serving_config(
    td_name: str, namespace: str, spec: TideDeploymentSpec, bootstrap_draft: str | None = None,
    launch_bands: Bands | None = None,
) -> dict[str, Any]:
    """What the servers run, as JSON: the ConfigMap holds it and the container args derive from it."""
    draft = spec.draft.initial or bootstrap_draft
    storage = spec.storage.s3
    return {
        "model": spec.target.model,
        "revision": spec.target.revision,
        "tokenizer": spec.target.tokenizer,
        "servedModelName": spec.target.served_model_name or td_name,
        "tensorParallelSize": spec.target.tensor_parallel_size,
        "port": spec.inference.port,
        "speculativeConfig": speculative_config(spec, draft, launch_bands) if draft else None,
        "extraArgs": list(spec.inference.extra_args),
        "registryUri": pod.s3_uri(td_name, namespace, storage),
        # Always named, capture on or off: capture is switched at runtime through the plugin (never
        # on while spec.control.capture.enabled is false), so toggling it changes no pod template,
        # restarts no pod, and leaves no env var behind that a strategic merge patch cannot remove.
        "captureUri": pod.s3_uri(td_name, namespace, storage, "captures") + "/",
    }


def vllm_args(rendered: dict[str, Any], config: OperatorConfig) -> list[str]:
    """Command-line arguments of the vLLM OpenAI server; ``$(POD_IP)`` is expanded by the kubelet."""
    model = rendered["model"]
    args = ["--model", model]
    if is_hub_id(model):
        args += ["--revision", rendered["revision"]]
    if model.startswith("s3://"):
        args += ["--load-format", "runai_streamer"]
    if rendered["tokenizer"]:
        args += ["--tokenizer", rendered["tokenizer"]]
    args += ["--served-model-name", rendered["servedModelName"]]
    args += ["--tensor-parallel-size", str(rendered["tensorParallelSize"])]
    args += ["--host", "$(POD_IP)", "--port", str(rendered["port"])]
    if config.serving.worker_extension_cls:
        args += ["--worker-extension-cls", config.serving.worker_extension_cls]
    if config.serving.shutdown_timeout_seconds:
        args += ["--shutdown-timeout", str(config.serving.shutdown_timeout_seconds)]
    if rendered["speculativeConfig"]:
        if config.serving.scheduler_cls:
            args += ["--scheduler-cls", config.serving.scheduler_cls]
        args += ["--speculative-config", json.dumps(rendered["speculativeConfig"], separators=(",", ":"))]
    extra_args: list[str] = rendered["extraArgs"]
    return args + extra_args


def _env(td_name: str, spec: TideDeploymentSpec, rendered: dict[str, Any], config: OperatorConfig) -> list[Any]:
    env = [pod.field_env("POD_IP", "status.podIP"), pod.field_env("TIDE_POD_NAME", "metadata.name")]
    env += pod.storage_env(spec)
    env.append({"name": sc.CONTROL_TOKEN_FILE_ENV, "value": f"{control_token.MOUNT_DIR}/{CONTROL_AUTH_KEY}"})
    env.append({"name": sc.CONTROL_PORT_ENV, "value": str(config.serving.control_port)})
    env.append({"name": "TIDE_TARGET_REVISION", "value": spec.target.revision})
    env.append({"name": "TIDE_REGISTRY_URI", "value": rendered["registryUri"]})
    env.append({"name": "TIDE_CAPTURE_URI", "value": rendered["captureUri"]})
    if config.serving.vllm_plugins:
        env.append({"name": "VLLM_PLUGINS", "value": config.serving.vllm_plugins})
    return env


def _container(
    td_name: str,
    spec: TideDeploymentSpec,
    placement: Placement,
    config: OperatorConfig,
    rendered: dict[str, Any],
) -> dict[str, Any]:
    gpu_class = _inference_class(placement)
    return {
        "name": CONTAINER_NAME,
        "image": spec.inference.image or config.serving.image_for(gpu_class.vendor),
        "command": list(config.serving.command),
        "args": vllm_args(rendered, config),
        "env": _env(td_name, spec, rendered, config),
        "ports": [{"name": PORT_NAME, "containerPort": spec.inference.port, "protocol": "TCP"},
                  {"name": sc.CONTROL_PORT_NAME, "containerPort": config.serving.control_port, "protocol": "TCP"}],
        # vLLM answers /health 503 once its engine process has died, but the server lives on: only a
        # liveness probe restarts it. Loading weights can take many minutes, so the startup probe
        # holds liveness off until the first success (at most 30 min).
        "startupProbe": {"httpGet": {"path": "/health", "port": PORT_NAME}, "periodSeconds": 10,
                         "timeoutSeconds": 5, "failureThreshold": 180},
        "readinessProbe": {
            "httpGet": {"path": "/health", "port": PORT_NAME},
            "periodSeconds": 10,
            # A busy engine answers /health late; the 1 s default would take loaded pods out of service.
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        # Slow answers under load are not death: a minute of failures in a row before a restart.
        "livenessProbe": {"httpGet": {"path": "/health", "port": PORT_NAME}, "periodSeconds": 10,
                          "timeoutSeconds": 10, "failureThreshold": 6},
        "resources": pod.gpu_resources(spec.inference, gpu_class, spec.inference.gpus_per_replica),
        "volumeMounts": _volume_mounts(config),
        **_lifecycle(config),
    }


def _lifecycle(config: OperatorConfig) -> dict[str, Any]:
    """A preStop sleep: a deleted pod keeps serving until endpoints and gateways stop sending to it."""
    sleep = config.serving.pre_stop_sleep_seconds
    return {"lifecycle": {"preStop": {"exec": {"command": ["sleep", str(sleep)]}}}} if sleep else {}


def _volume_mounts(config: OperatorConfig) -> list[dict[str, Any]]:
    mounts = [{"name": pod.SHM_VOLUME, "mountPath": pod.SHM_MOUNT_PATH},
              {"name": CONTROL_TOKEN_VOLUME, "mountPath": control_token.MOUNT_DIR, "readOnly": True}]
    if config.serving.read_only_root_filesystem:
        mounts.append({"name": pod.SCRATCH_VOLUME, "mountPath": pod.SCRATCH_MOUNT_PATH})
    return mounts


def _control_token_volume(td_name: str) -> dict[str, Any]:
    # Readable by the container's (non-root, any) user; no pod fsGroup is set to own it by group.
    return {"name": CONTROL_TOKEN_VOLUME,
            "secret": {"secretName": names.control_token_secret_name(td_name), "defaultMode": 0o444}}


def _inference_class(placement: Placement) -> Any:
    if placement.inference.gpu_class is None:
        raise ValueError(f"no inference GPU class chosen: {placement.inference.message}")
    return placement.inference.gpu_class


def _pod_template(
    td_name: str,
    spec: TideDeploymentSpec,
    placement: Placement,
    config: OperatorConfig,
    rendered: dict[str, Any],
) -> dict[str, Any]:
    gpu_class = _inference_class(placement)
    template = {
        "metadata": {
            "labels": {**labels.serving_labels(td_name), labels.GPU_CLASS_LABEL: gpu_class.name},
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(spec.inference.port),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            "containers": [_container(td_name, spec, placement, config, rendered)],
            "terminationGracePeriodSeconds": config.serving.termination_grace_seconds,
            "volumes": [pod.shm_volume(config.serving.shm_size), _control_token_volume(td_name)]
            + ([pod.scratch_volume()] if config.serving.read_only_root_filesystem else []),
            **pod.scheduling_fields(spec.inference, placement.inference),
        },
    }
    merged = merge_override(template, spec.inference.pod_template_override or {})
    return pod.restricted(merged, config.serving.read_only_root_filesystem)


def build_serving_deployment(
    td_name: str,
    namespace: str,
    spec: TideDeploymentSpec,
    placement: Placement,
    operator_config: OperatorConfig,
    *,
    bootstrap_draft: str | None = None,
    launch_bands: Bands | None = None,
) -> dict[str, Any]:
    """The vLLM Deployment on the chosen inference class; raises ValueError when none was chosen.

    ``launch_bands``: speculative tokens per batch size the pods launch with, for pods that cannot
    switch at runtime (rolled by the operator, ``LAUNCH_BANDS_ANNOTATION`` remembers it across passes).
    """
    rendered = render_serving_config(td_name, namespace, spec, bootstrap_draft, launch_bands)
    template = _pod_template(td_name, spec, placement, operator_config, rendered)
    # Always present ("" = the spec's table): a key left out would survive a strategic merge patch.
    annotations = {SPEC_HASH_ANNOTATION: stable_hash(template), LAUNCH_BANDS_ANNOTATION: "" if launch_bands is None
                   else json.dumps([list(band) for band in launch_bands])}
    if bootstrap_draft and not spec.draft.initial:
        annotations[BOOTSTRAP_DRAFT_ANNOTATION] = bootstrap_draft
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": names.serving_name(td_name),
            "namespace": namespace,
            "labels": labels.serving_labels(td_name),
            # Hash of the template only: replicas belong to the scale subresource (an autoscaler).
            "annotations": annotations,
        },
        "spec": {
            "replicas": spec.inference.replicas,
            "selector": {"matchLabels": labels.selector_labels(td_name, labels.COMPONENT_INFERENCE)},
            # GPU pools rarely have a spare node for a surge pod: replace one pod at a time.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": template,
        },
    }


def build_service(td_name: str, namespace: str, spec: TideDeploymentSpec) -> dict[str, Any]:
    """ClusterIP Service in front of the vLLM pods (OpenAI API and /metrics)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": names.serving_name(td_name),
            "namespace": namespace,
            "labels": labels.serving_labels(td_name),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": labels.selector_labels(td_name, labels.COMPONENT_INFERENCE),
            "ports": [{"name": PORT_NAME, "port": spec.inference.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def build_serving_configmap(
    td_name: str, namespace: str, spec: TideDeploymentSpec, bootstrap_draft: str | None = None,
    launch_bands: Bands | None = None,
) -> dict[str, Any]:
    """The rendered serving config, for people and tools (the pods get the same through their args)."""
    rendered = render_serving_config(td_name, namespace, spec, bootstrap_draft, launch_bands)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": names.serving_config_name(td_name),
            "namespace": namespace,
            "labels": labels.serving_labels(td_name),
        },
        "data": {SERVING_CONFIG_KEY: json.dumps(rendered, indent=2, sort_keys=True)},
    }
