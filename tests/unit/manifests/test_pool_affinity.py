"""Placement prefers, the scheduler decides: the pods require any allowed class of the chosen vendor and
GPU resource, and prefer each by its value to the pool (inference throughput; training value)."""

from __future__ import annotations

from manifest_fixtures import spec_with

from tide_operator.catalog import DEFAULT_CATALOG
from tide_operator.config import OperatorConfig
from tide_operator.control.placement import NodeInventory, PoolRequest, choose_pools
from tide_operator.manifests.serving import build_serving_deployment
from tide_operator.manifests.trainer import build_trainer_job

CONFIG = OperatorConfig()
CPU_ONLY = [NodeInventory("cpu-0", {}, {})]  # an autoscaled cluster at zero GPU nodes


def _placement(allowed_inference=None, allowed_training=None):
    return choose_pools(CPU_ONLY, DEFAULT_CATALOG, PoolRequest(allowed_inference, 2, 4),
                        PoolRequest(allowed_training, 1, 4))


def _node_affinity(pod_spec):
    return pod_spec["affinity"]["nodeAffinity"]


def _required_values(affinity) -> list[tuple[str, tuple[str, ...]]]:
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(len(t["matchExpressions"]) == 1 and t["matchExpressions"][0]["operator"] == "In" for t in terms)
    return [(t["matchExpressions"][0]["key"], tuple(t["matchExpressions"][0]["values"])) for t in terms]


def _preferred(affinity) -> list[tuple[int, list[tuple[str, str, tuple[str, ...]]]]]:
    return [(p["weight"], [(e["key"], e["operator"], tuple(e["values"])) for e in p["preference"]["matchExpressions"]])
            for p in affinity["preferredDuringSchedulingIgnoredDuringExecution"]]


def test_serving_pods_without_any_gpu_node_require_the_vendor_and_prefer_by_throughput() -> None:
    spec = spec_with(inference={"replicas": 2, "gpusPerReplica": 4})
    deployment = build_serving_deployment("chat", "llm", spec, _placement(), CONFIG)
    pod = deployment["spec"]["template"]["spec"]
    affinity = _node_affinity(pod)
    nvidia = [c for c in DEFAULT_CATALOG.gpu_classes if c.resource_name == "nvidia.com/gpu"]
    expected = [(r.key, r.values) for c in nvidia for r in c.node_labels]
    assert _required_values(affinity) == expected  # H200, H100, A100, L40S: no AMD class
    weights = [w for w, _ in _preferred(affinity)]
    assert weights == [100, 71, 28, 21]  # inference throughput relative to H200
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert deployment["spec"]["template"]["metadata"]["labels"]["tide.dev/gpu-class"] == "H200"


def test_a_class_with_two_label_requirements_is_preferred_once_per_node() -> None:
    spec = spec_with(inference={"replicas": 1, "gpusPerReplica": 4, "gpuClasses": ["MI300X", "MI250"]})
    placement = _placement(allowed_inference=("MI300X", "MI250"))
    affinity = _node_affinity(build_serving_deployment("chat", "llm", spec, placement, CONFIG)["spec"]["template"]
                              ["spec"])
    preferred = _preferred(affinity)
    device, product = "amd.com/gpu.device-id", "amd.com/gpu.product-name"
    # MI300X (weight 100) by device id, or by product name on a node without that device id; MI250 alike.
    assert preferred[0] == (100, [(device, "In", ("74a1",))])
    assert preferred[1] == (100, [(product, "In", ("AMD_Instinct_MI300X", "AMD_Instinct_MI300X_OAM")),
                                  (device, "NotIn", ("74a1",))])
    assert preferred[2] == (23, [(device, "In", ("740c",))])  # 1.0 / 4.42
    assert preferred[3][1][1] == (device, "NotIn", ("740c",))


def test_one_allowed_class_needs_no_preference() -> None:
    spec = spec_with(inference={"gpuClasses": ["H100"]})
    affinity = _node_affinity(build_serving_deployment("chat", "llm", spec, _placement(("H100",)), CONFIG)
                              ["spec"]["template"]["spec"])
    assert [key for key, _ in _required_values(affinity)] == ["nvidia.com/gpu.product"]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in affinity


def test_trainer_job_requires_the_training_vendor_and_prefers_by_training_value() -> None:
    job = build_trainer_job("chat", "llm", spec_with(), _placement(), run_id="r1", operator_config=CONFIG)
    pod = job["spec"]["template"]["spec"]
    affinity = _node_affinity(pod)
    keys = {key for key, _ in _required_values(affinity)}
    assert keys == {"amd.com/gpu.device-id", "amd.com/gpu.product-name"}  # MI250 (best value) and MI300X
    by_value = [(w, exprs[0][2]) for w, exprs in _preferred(affinity) if exprs[0][0] == "amd.com/gpu.device-id"]
    assert by_value == [(40, ("74a1",)), (100, ("740c",))]  # MI300X 1.77/4.42 of MI250's 1.0
    assert pod["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 4}
    assert job["spec"]["template"]["metadata"]["labels"]["tide.dev/gpu-class"] == "MI250"
