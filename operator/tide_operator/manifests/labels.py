"""Labels and selectors of the children (app.kubernetes.io/* plus tide.dev/deployment)."""

from __future__ import annotations

from tide_operator.manifests.names import dns_label

MANAGED_BY = "tide-operator"
DEPLOYMENT_LABEL = "tide.dev/deployment"
GPU_CLASS_LABEL = "tide.dev/gpu-class"
TRAINING_RUN_LABEL = "tide.dev/training-run"
# What a trainer-image Job does (the pods of all three are component "trainer"): selectors never use it.
JOB_KIND_LABEL = "tide.dev/job-kind"
JOB_KIND_TRAINING = "training"
JOB_KIND_EVALUATION = "evaluation"  # the draft pool's recall evaluation (issue 16)
JOB_KIND_BOOTSTRAP = "bootstrap"
# The lent replicas' group (training.lendWhenIdle): their Deployment selects it, the main one cannot
# (a Deployment's selector is immutable), so the main ReplicaSets skip lent pods by their owner.
SERVING_GROUP_LABEL = "tide.dev/serving-group"
SERVING_GROUP_LENT = "lent"
COMPONENT_INFERENCE = "inference"
COMPONENT_TRAINER = "trainer"


def selector_labels(td_name: str, component: str) -> dict[str, str]:
    """The immutable part: what a Deployment's selector and the scale subresource match."""
    return {"app.kubernetes.io/component": component, DEPLOYMENT_LABEL: td_name}


def common_labels(td_name: str, component: str, app: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": td_name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **selector_labels(td_name, component),
    }


def serving_labels(td_name: str) -> dict[str, str]:
    return common_labels(td_name, COMPONENT_INFERENCE, "vllm")


def lent_selector(td_name: str) -> str:
    """The lent pods (a subset of ``serving_selector``'s)."""
    return serving_selector(td_name) + f",{SERVING_GROUP_LABEL}={SERVING_GROUP_LENT}"


def trainer_labels(td_name: str, run_id: str, job_kind: str = JOB_KIND_TRAINING) -> dict[str, str]:
    return {
        **common_labels(td_name, COMPONENT_TRAINER, "tide-trainer"),
        TRAINING_RUN_LABEL: dns_label(run_id),
        JOB_KIND_LABEL: job_kind,
    }


def serving_selector(td_name: str) -> str:
    """``status.selector`` for the scale subresource (label selector string form)."""
    return ",".join(f"{key}={value}" for key, value in sorted(selector_labels(td_name, COMPONENT_INFERENCE).items()))
