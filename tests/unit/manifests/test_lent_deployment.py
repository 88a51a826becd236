"""The lent replicas' Deployment (issue 17 item 3): the serving template on the training class, behind
a readiness gate the operator holds, selected apart from the main Deployment's pods."""

from __future__ import annotations

import pytest
from manifest_fixtures import placement, spec_with

from tide_contracts import versions
from tide_operator.config import OperatorConfig
from tide_operator.control.lending import SERVING_GATE
from tide_operator.control.placement import Placement, PoolChoice
from tide_operator.manifests import labels
from tide_operator.manifests.serving import build_serving_deployment
from tide_operator.manifests.serving_fleet import build_lent_deployment

CONFIG = OperatorConfig()


def lent(spec=None, where=None, replicas=3):
    return build_lent_deployment("chat", "llm", spec or spec_with(), where or placement(), CONFIG, replicas)


def test_named_and_selected_apart_from_the_main_deployment() -> None:
    deployment = lent()
    main = build_serving_deployment("chat", "llm", spec_with(), placement(), CONFIG)
    assert deployment["metadata"]["name"] == "chat-vllm-lent" != main["metadata"]["name"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector[labels.SERVING_GROUP_LABEL] == labels.SERVING_GROUP_LENT
    assert main["spec"]["selector"]["matchLabels"].items() <= selector.items()  # the Service still routes to it
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()
    assert deployment["spec"]["replicas"] == 3  # the operator's, not spec.inference.replicas (2)


def test_placed_on_the_training_class_with_its_vendor_image_behind_the_gate() -> None:
    template = lent()["spec"]["template"]
    assert template["metadata"]["labels"][labels.GPU_CLASS_LABEL] == "MI250"
    (container,) = template["spec"]["containers"]
    assert container["image"] == versions.image(versions.SERVING_ROCM_REPOSITORY)
    assert container["resources"]["limits"]["amd.com/gpu"] == 4
    terms = template["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert "740c" in str(terms)
    assert "nvidia" not in str(terms)
    assert template["spec"]["readinessGates"] == [{"conditionType": SERVING_GATE}]


def test_tolerates_the_training_pool_taints_too() -> None:
    spec = spec_with(inference={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
                     training={"tolerations": [{"key": "amd.com/gpu", "operator": "Exists"},
                                               {"key": "nvidia.com/gpu", "operator": "Exists"}]})
    keys = [t["key"] for t in lent(spec)["spec"]["template"]["spec"]["tolerations"]]
    assert keys == ["nvidia.com/gpu", "amd.com/gpu"]


def test_the_hash_covers_the_gate() -> None:
    from tide_operator.manifests.fingerprint import SPEC_HASH_ANNOTATION, stable_hash

    deployment = lent()
    assert deployment["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == stable_hash(deployment["spec"]["template"])
    assert lent(replicas=1)["metadata"]["annotations"] == deployment["metadata"]["annotations"]


def test_no_training_class_is_an_error() -> None:
    chosen = placement()
    with pytest.raises(ValueError, match="no training GPU class"):
        lent(where=Placement(chosen.inference, PoolChoice(None, "NoAllowedGPUClass", "none allowed")))
