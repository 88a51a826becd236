"""Images follow the chosen GPU class's vendor (issue 14): CUDA builds on NVIDIA, ROCm builds on AMD,
unless the spec names an image; the trainer learns whether its pool really has GPUs."""

from __future__ import annotations

import pytest
from manifest_fixtures import env_map, placement, spec_with

from tide_contracts import versions
from tide_operator.catalog import Vendor
from tide_operator.config import OperatorConfig, load_operator_config
from tide_operator.control.pod_policy import allowed_image_prefixes
from tide_operator.manifests.serving import build_serving_deployment
from tide_operator.manifests.trainer import REQUIRE_GPU_ENV, build_trainer_job

CONFIG = OperatorConfig()
CUDA_SERVING, ROCM_SERVING = (versions.image(versions.SERVING_REPOSITORY),
                              versions.image(versions.SERVING_ROCM_REPOSITORY))
CUDA_TRAINER, ROCM_TRAINER = (versions.image(versions.TRAINER_REPOSITORY),
                              versions.image(versions.TRAINER_ROCM_REPOSITORY))


def serving_container(spec=None, inference="H100", config=CONFIG):
    deployment = build_serving_deployment("chat", "llm", spec or spec_with(), placement(inference=inference), config)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def trainer_container(spec=None, training="MI250", config=CONFIG):
    job = build_trainer_job("chat", "llm", spec or spec_with(), placement(training=training), run_id="r1",
                            operator_config=config)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize(("inference", "image", "resource"), [
    ("H100", CUDA_SERVING, "nvidia.com/gpu"), ("MI300X", ROCM_SERVING, "amd.com/gpu")])
def test_serving_image_and_gpu_resource_follow_the_vendor(inference: str, image: str, resource: str) -> None:
    container = serving_container(inference=inference)
    assert container["image"] == image
    assert container["resources"]["limits"] == {resource: 4}


@pytest.mark.parametrize(("training", "image", "resource"), [
    ("A100", CUDA_TRAINER, "nvidia.com/gpu"), ("MI250", ROCM_TRAINER, "amd.com/gpu")])
def test_trainer_image_and_gpu_resource_follow_the_vendor(training: str, image: str, resource: str) -> None:
    container = trainer_container(training=training)
    assert container["image"] == image
    assert container["resources"]["limits"] == {resource: 4}


def test_a_spec_image_wins_over_the_vendor_default() -> None:
    spec = spec_with(inference={"image": f"{CUDA_SERVING}-custom"}, training={"image": f"{CUDA_TRAINER}-custom"})
    assert serving_container(spec, inference="MI300X")["image"] == f"{CUDA_SERVING}-custom"
    assert trainer_container(spec, training="MI250")["image"] == f"{CUDA_TRAINER}-custom"


def test_a_vendor_without_an_entry_takes_the_plain_image() -> None:
    config = load_operator_config({"serving": {"image": "reg.local/vllm:1", "vendorImages": {}},
                                   "trainer": {"image": "reg.local/trainer:1", "vendorImages": {}}})
    assert serving_container(inference="MI300X", config=config)["image"] == "reg.local/vllm:1"
    assert trainer_container(training="MI250", config=config)["image"] == "reg.local/trainer:1"
    assert config.trainer.image_for(Vendor.NVIDIA) == "reg.local/trainer:1"


def test_every_vendor_image_is_admitted_by_the_default_allowlist() -> None:
    repositories = {image.rsplit(":", 1)[0] for image in (CUDA_SERVING, ROCM_SERVING, CUDA_TRAINER, ROCM_TRAINER)}
    assert set(allowed_image_prefixes(CONFIG)) == repositories


@pytest.mark.parametrize(("cpu_only", "required"), [(False, "1"), (True, "0")])
def test_cpu_only_pool_reaches_the_trainer(cpu_only: bool, required: str) -> None:
    config = load_operator_config({"trainer": {"cpuOnly": cpu_only}})
    assert env_map(trainer_container(config=config))[REQUIRE_GPU_ENV] == required
