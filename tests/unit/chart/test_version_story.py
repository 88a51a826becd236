"""One version story (issue 14): the chart, the operator config, hack/build-images.sh, the Dockerfiles
and the serving plugin's engine gate all tell the versions of tide_contracts/versions.py.

Images cannot be built here: the build script runs against a stand-in docker that records its
arguments, and the Dockerfiles are read as text.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tide_contracts import versions
from tide_operator.catalog import Vendor
from tide_operator.config import OperatorConfig, load_operator_config
from tide_serving.engine_support import TESTED, check_engine

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "tide-operator"
DEFAULTS = OperatorConfig()

# image name of hack/build-images.sh -> the operator config's default it must produce
DEFAULT_IMAGES = {
    "serving": DEFAULTS.serving.image,
    "serving-rocm": DEFAULTS.serving.image_for(Vendor.AMD),
    "trainer": DEFAULTS.trainer.image,
    "trainer-rocm": DEFAULTS.trainer.image_for(Vendor.AMD),
    "operator": versions.image(versions.OPERATOR_REPOSITORY),
    "serving-cpu": versions.image(versions.SERVING_CPU_REPOSITORY),
}
# build arg -> the version it must carry, per Dockerfile
PINS = {
    "serving": {"VLLM_IMAGE": versions.VLLM_CUDA_IMAGE, "VLLM_VERSION": versions.VLLM_VERSION},
    "serving-rocm": {"VLLM_IMAGE": versions.VLLM_ROCM_IMAGE, "VLLM_VERSION": versions.VLLM_VERSION},
    "serving-cpu": {"VLLM_VERSION": versions.VLLM_VERSION},
    "trainer": {"TORCH_IMAGE": versions.TORCH_CUDA_IMAGE},
    "trainer-rocm": {"TORCH_IMAGE": versions.TORCH_ROCM_IMAGE},
    "operator": {},
}


def dockerfile_defaults(image: str) -> dict[str, str]:
    text = (REPO / "images" / f"{image}.Dockerfile").read_text()
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.MULTILINE))


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, dict[str, str]]]:
    """What hack/build-images.sh asks docker to build: image -> (tag, build args)."""
    work = tmp_path_factory.mktemp("docker")
    docker, calls = work / "docker", work / "calls"
    docker.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\n')
    docker.chmod(docker.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if k not in ("REGISTRY", "TAG", "PUSH")}
    subprocess.run(["bash", str(REPO / "hack" / "build-images.sh"), *PINS], env={**env, "DOCKER": str(docker)},
                   check=True, capture_output=True, text=True, timeout=30)
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for line in calls.read_text().splitlines():
        words = line.split()
        image = Path(words[words.index("-f") + 1]).name.removesuffix(".Dockerfile")
        args = dict(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--build-arg")
        out[image] = (words[words.index("-t") + 1], args)
    return out


def test_project_chart_and_images_share_one_version() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert pyproject["project"]["version"] == chart["appVersion"] == versions.TIDE_VERSION


def test_chart_values_are_the_operator_config_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    from_chart = load_operator_config(values)
    for section in ("serving", "trainer"):
        assert getattr(from_chart, section).image == getattr(DEFAULTS, section).image, section
        assert getattr(from_chart, section).vendor_images == getattr(DEFAULTS, section).vendor_images, section
    assert from_chart.trainer.cpu_only is DEFAULTS.trainer.cpu_only is False


def test_the_engine_gate_accepts_exactly_the_pinned_vllm() -> None:
    # Widening TESTED needs an engine-tier run on the new version; the pins move to the gate, not back.
    assert set(TESTED) == {versions.VLLM_VERSION}
    assert check_engine(versions.VLLM_VERSION, "v1", allow_untested=False).supported


@pytest.mark.parametrize("image", sorted(PINS))
def test_dockerfile_defaults_pin_the_versions(image: str) -> None:
    defaults = dockerfile_defaults(image)
    assert {arg: defaults.get(arg) for arg in PINS[image]} == PINS[image]


@pytest.mark.parametrize("image", sorted(PINS))
def test_build_script_tags_the_default_images_and_passes_the_pins(
        image: str, builds: dict[str, tuple[str, dict[str, str]]]) -> None:
    tag, args = builds[image]
    assert tag == DEFAULT_IMAGES[image]
    assert args == PINS[image]
    assert set(args) <= set(dockerfile_defaults(image))  # every arg passed is one the Dockerfile declares


def test_serving_bases_are_tagged_by_the_vllm_version() -> None:
    for image in ("serving", "serving-rocm"):
        text = (REPO / "images" / f"{image}.Dockerfile").read_text()
        assert "FROM ${VLLM_IMAGE}:v${VLLM_VERSION}" in text, image
