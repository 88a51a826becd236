"""Names of the objects the operator owns, derived from the TideDeployment's name.

Deterministic, so an operator restart finds its children instead of creating duplicates. Every
name is an RFC 1035 label of at most 63 characters (Services and Job pod labels need that).
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 63
_HASH_LENGTH = 8


def dns_label(text: str, max_length: int = MAX_NAME) -> str:
    """``text`` lower-cased with runs of other characters as ``-``; when it is too long, cut and
    end with a hash of the whole text so distinct inputs keep distinct names."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if len(label) <= max_length and label == text:
        return label
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]
    head = label[: max_length - _HASH_LENGTH - 1].rstrip("-")
    return f"{head}-{digest}" if head else digest


def serving_name(td_name: str) -> str:
    """Deployment and Service of the vLLM servers."""
    return dns_label(f"{td_name}-vllm")


def lent_serving_name(td_name: str) -> str:
    """Deployment of the vLLM replicas lent to serving on the training class (training.lendWhenIdle)."""
    return dns_label(f"{td_name}-vllm-lent")


def group_serving_name(td_name: str, gpu_class: str) -> str:
    """Deployment of one serving group's vLLM pods (inference.servingGroups): named like its class Service."""
    return class_service_name(td_name, gpu_class)


def class_service_name(td_name: str, gpu_class: str) -> str:
    """Service of one GPU class's vLLM pods (a backend of the HTTPRoute, inference.gateway)."""
    return dns_label(f"{td_name}-vllm-{gpu_class.lower()}")


def disruption_budget_name(td_name: str) -> str:
    """PodDisruptionBudget of the vLLM pods: named like their Deployment (another kind, no clash)."""
    return serving_name(td_name)


def serving_config_name(td_name: str) -> str:
    return dns_label(f"{td_name}-serving")


def control_token_secret_name(td_name: str) -> str:
    """Secret (key ``token``) with the bearer token of the serving plugin's control routes."""
    return dns_label(f"{td_name}-control")


def trainer_job_name(td_name: str, run_id: str) -> str:
    """``<td>-train-<run id>``; a long or unusual run id becomes a hash, the rest stays readable."""
    return _run_job_name(td_name, "train", run_id)


def evaluation_job_name(td_name: str, run_id: str) -> str:
    """``<td>-eval-<run id>``: the draft pool's recall evaluation of a run id (never a training run's name)."""
    return _run_job_name(td_name, "eval", run_id)


def _run_job_name(td_name: str, kind: str, run_id: str) -> str:
    full = f"{td_name}-{kind}-{run_id}"
    if dns_label(full) == full:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:_HASH_LENGTH]
    head = td_name[: MAX_NAME - len(f"-{kind}-") - _HASH_LENGTH].rstrip("-")  # td names are RFC 1035 labels
    return f"{head}-{kind}-{digest}"


def bootstrap_key(target_revision: str) -> str:
    """The registry key of a target revision's bootstrap head (``bootstrap/<key>/``): any revision string
    becomes 12 hex characters, so a spec field never shapes an S3 key."""
    return hashlib.sha256(target_revision.encode()).hexdigest()[:12]


def bootstrap_job_name(td_name: str, target_revision: str) -> str:
    """``<td>-bootstrap-<8 hex of the revision>``: one init Job per target revision, found again after a restart."""
    suffix = f"-bootstrap-{bootstrap_key(target_revision)[:_HASH_LENGTH]}"
    return td_name[: MAX_NAME - len(suffix)].rstrip("-") + suffix  # td names are RFC 1035 labels
