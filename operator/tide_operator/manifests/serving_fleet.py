"""The serving Deployments beyond the one: a Deployment per serving group (inference.servingGroups) and
the lent replicas on the training class (training.lendWhenIdle). Each is the serving template of
serving.py, placed on its class alone, with its own name, group label and replicas."""

from __future__ import annotations

from typing import Any

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.config import OperatorConfig
from tide_operator.control.actions import Bands
from tide_operator.control.lending import SERVING_GATE
from tide_operator.control.placement import GroupPlacement, Placement
from tide_operator.manifests import labels, names
from tide_operator.manifests.fingerprint import SPEC_HASH_ANNOTATION, stable_hash
from tide_operator.manifests.serving import build_serving_deployment


def build_lent_deployment(
    td_name: str,
    namespace: str,
    spec: TideDeploymentSpec,
    placement: Placement,
    operator_config: OperatorConfig,
    replicas: int,
    *,
    bootstrap_draft: str | None = None,
    launch_bands: Bands | None = None,
) -> dict[str, Any]:
    """The vLLM replicas lent to serving on the training class (training.lendWhenIdle).

    The serving pods' template placed like a trainer Job (the training class's affinity, the inference
    and training tolerations: the training pool's taints admit them), with a readiness gate the
    operator holds: a lent pod takes requests only once put in service, and leaves service before it
    is deleted (control/lending.py). Its replicas are the operator's, never the scale subresource's.
    """
    training = placement.training
    if training.gpu_class is None:
        raise ValueError(f"no training GPU class chosen: {training.message}")
    tolerations = tuple(dict.fromkeys((*spec.inference.tolerations, *spec.training.tolerations)))
    lent_spec = spec.model_copy(update={"inference": spec.inference.model_copy(update={"tolerations": tolerations})})
    deployment = build_serving_deployment(td_name, namespace, lent_spec, Placement(training, training),
                                          operator_config, bootstrap_draft=bootstrap_draft,
                                          launch_bands=launch_bands)
    group = {labels.SERVING_GROUP_LABEL: labels.SERVING_GROUP_LENT}
    deployment["metadata"]["name"] = names.lent_serving_name(td_name)
    deployment["metadata"]["labels"].update(group)
    deployment["spec"]["replicas"] = replicas
    deployment["spec"]["selector"]["matchLabels"].update(group)
    template = deployment["spec"]["template"]
    template["metadata"]["labels"].update(group)
    template["spec"]["readinessGates"] = [{"conditionType": SERVING_GATE}]
    deployment["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = stable_hash(template)
    return deployment


def build_group_deployment(
    td_name: str,
    namespace: str,
    spec: TideDeploymentSpec,
    group: GroupPlacement,
    operator_config: OperatorConfig,
    *,
    bootstrap_draft: str | None = None,
    launch_bands: Bands | None = None,
) -> dict[str, Any]:
    """One serving group's vLLM Deployment (inference.servingGroups): the serving template on its class
    alone, with its GPUs per replica, and its share of the replicas (the operator's split, so the scale
    subresource's total is inference.replicas, not any one Deployment's)."""
    choice = group.choice
    if choice.gpu_class is None:
        raise ValueError(f"no GPU class for a serving group: {choice.message}")
    group_spec = spec.model_copy(update={"inference": spec.inference.model_copy(
        update={"gpus_per_replica": group.gpus_per_replica})})
    deployment = build_serving_deployment(td_name, namespace, group_spec, Placement(choice, choice), operator_config,
                                          bootstrap_draft=bootstrap_draft, launch_bands=launch_bands)
    label = {labels.SERVING_GROUP_LABEL: choice.gpu_class.name}
    deployment["metadata"]["name"] = names.group_serving_name(td_name, choice.gpu_class.name)
    deployment["metadata"]["labels"].update(label)
    deployment["spec"]["replicas"] = group.replicas
    deployment["spec"]["selector"]["matchLabels"].update(label)
    template = deployment["spec"]["template"]
    template["metadata"]["labels"].update(label)
    deployment["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = stable_hash(template)
    return deployment


def serving_deployments(td_name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
                        operator_config: OperatorConfig, *, bootstrap_draft: str | None = None,
                        launch_bands: Bands | None = None) -> list[dict[str, Any]]:
    """The serving Deployments: one per serving group, else the one on the inference class."""
    if placement.groups:
        return [build_group_deployment(td_name, namespace, spec, group, operator_config,
                                       bootstrap_draft=bootstrap_draft, launch_bands=launch_bands)
                for group in placement.groups]
    return [build_serving_deployment(td_name, namespace, spec, placement, operator_config,
                                     bootstrap_draft=bootstrap_draft, launch_bands=launch_bands)]
