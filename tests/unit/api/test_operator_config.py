from __future__ import annotations

import pytest

from tide_operator.catalog import DEFAULT_CATALOG, ConfigError, Vendor, load_catalog
from tide_operator.config import OperatorConfig, load_operator_config


def test_default_catalog_seeds_tide_measurements() -> None:
    h100, mi300x, mi250 = (DEFAULT_CATALOG.get(name) for name in ("H100", "MI300X", "MI250"))
    assert (h100.inference_throughput, h100.training_throughput) == (6.76, 2.44)
    assert (mi300x.inference_throughput, mi300x.training_throughput) == (4.42, 1.77)
    assert (mi250.inference_throughput, mi250.training_throughput) == (1.0, 1.0)
    assert set(DEFAULT_CATALOG.names()) == {"H200", "H100", "MI300X", "A100", "L40S", "MI250"}
    for gpu_class in DEFAULT_CATALOG.gpu_classes:
        assert gpu_class.source, gpu_class.name
        expected = "nvidia.com/gpu" if gpu_class.vendor is Vendor.NVIDIA else "amd.com/gpu"
        assert gpu_class.resource_name == expected


def test_node_labels_identify_classes() -> None:
    assert DEFAULT_CATALOG.class_of({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}).name == "H100"
    assert DEFAULT_CATALOG.class_of({"amd.com/gpu.device-id": "74a1"}).name == "MI300X"
    assert DEFAULT_CATALOG.class_of({"amd.com/gpu.product-name": "AMD_Instinct_MI250X_MI250"}).name == "MI250"
    assert DEFAULT_CATALOG.class_of({"nvidia.com/gpu.product": "Tesla-T4"}) is None
    assert DEFAULT_CATALOG.class_of({}) is None


def test_catalog_round_trips_through_chart_values() -> None:
    values = DEFAULT_CATALOG.model_dump(by_alias=True, mode="json")
    assert "memoryMiB" in values["gpuClasses"][0]
    assert load_catalog(values) == DEFAULT_CATALOG


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"gpuClasses": []}, "gpuClasses"),
        ({"gpuClasses": [{"name": "X"}]}, "gpuClasses[0].vendor"),
        (
            {"gpuClasses": [{**DEFAULT_CATALOG.gpu_classes[0].model_dump(by_alias=True), "inferenceThroughput": 0}]},
            "gpuClasses[0].inferenceThroughput",
        ),
        ({"gpuClasses": [DEFAULT_CATALOG.gpu_classes[0].model_dump(by_alias=True)] * 2}, "gpuClasses"),
        (
            {"gpuClasses": [{**DEFAULT_CATALOG.gpu_classes[0].model_dump(by_alias=True), "nodeLabels": []}]},
            "gpuClasses[0].nodeLabels",
        ),
    ],
)
def test_catalog_errors_name_the_field(values: dict, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_catalog(values)
    assert caught.value.field == field


def test_operator_config_defaults_and_overrides() -> None:
    assert load_operator_config(None) == OperatorConfig()
    config = load_operator_config(
        {"serving": {"image": "registry.local/vllm-tide:dev"}, "prometheusUrl": "http://p:9090"}
    )
    assert config.serving.image == "registry.local/vllm-tide:dev"
    assert config.prometheus_url == "http://p:9090"
    assert config.catalog.names() == DEFAULT_CATALOG.names()
    with pytest.raises(ConfigError) as caught:
        load_operator_config({"serving": {"imag": "x"}})
    assert caught.value.field == "serving.imag"
