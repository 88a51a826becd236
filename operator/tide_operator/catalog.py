"""The GPU class catalog: how to recognise each GPU class on a node and what it is worth.

Part of the operator configuration (chart values ``gpuClasses``). Throughputs are relative to one
AMD MI250 (= 1.0) and only their ratios matter: the inference pool takes the fastest inference
class, the training pool the best training throughput per unit of inference value given up.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


class ConfigError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class _CatalogModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"


class LabelRequirement(_CatalogModel):
    """A node label whose value must be one of ``values``."""

    key: str = Field(min_length=1, max_length=253)
    values: tuple[str, ...] = Field(min_length=1)


class GpuClass(_CatalogModel):
    name: str = Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    vendor: Vendor
    resource_name: str = Field(min_length=1, pattern=r"^[a-z0-9.-]+/[a-z0-9.-]+$")
    """Extended resource the device plugin advertises (nvidia.com/gpu, amd.com/gpu)."""
    memory_mib: int = Field(
        gt=0, validation_alias=AliasChoices("memoryMiB", "memory_mib"), serialization_alias="memoryMiB"
    )
    node_labels: tuple[LabelRequirement, ...] = Field(min_length=1)
    """A node is of this class when ANY requirement matches (one nodeSelectorTerm each)."""
    inference_throughput: float = Field(gt=0)
    training_throughput: float = Field(gt=0)
    source: str = ""
    """Where the throughputs come from (measured, or an estimate and its reasoning)."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return any(labels.get(requirement.key) in requirement.values for requirement in self.node_labels)

    @property
    def training_value(self) -> float:
        """Training throughput per unit of inference throughput given up by training on this class."""
        return self.training_throughput / self.inference_throughput


class GpuCatalog(_CatalogModel):
    gpu_classes: tuple[GpuClass, ...] = Field(min_length=1)

    def names(self) -> tuple[str, ...]:
        return tuple(gpu_class.name for gpu_class in self.gpu_classes)

    def get(self, name: str) -> GpuClass:
        for gpu_class in self.gpu_classes:
            if gpu_class.name == name:
                return gpu_class
        raise KeyError(name)

    def class_of(self, labels: Mapping[str, str]) -> GpuClass | None:
        """The first class (catalog order) whose labels the node carries."""
        return next((gpu_class for gpu_class in self.gpu_classes if gpu_class.matches(labels)), None)


def load_catalog(raw: Any) -> GpuCatalog:
    """Catalog from operator config or chart values (``{"gpuClasses": [...]}``); errors name the field."""
    try:
        catalog = GpuCatalog.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise ConfigError(path or "gpuClasses", first["msg"]) from None
    names = catalog.names()
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ConfigError("gpuClasses", f"class {duplicates[0]!r} is listed twice")
    return catalog


_GFD = "nvidia.com/gpu.product"  # NVIDIA GPU Feature Discovery
_AMD_PRODUCT = "amd.com/gpu.product-name"  # AMD node labeller
_AMD_DEVICE = "amd.com/gpu.device-id"

# Order matters only for class_of (a node matching two classes takes the first).
DEFAULT_CATALOG = GpuCatalog(
    gpu_classes=(
        GpuClass(
            name="H200",
            vendor=Vendor.NVIDIA,
            resource_name="nvidia.com/gpu",
            memory_mib=143771,
            node_labels=(LabelRequirement(key=_GFD, values=("NVIDIA-H200", "NVIDIA-H200-NVL")),),
            # Estimate: H100 compute with 1.43x the HBM bandwidth (4.8 vs 3.35 TB/s); decode is
            # bandwidth-bound, so 6.76 * 1.4. Training is compute-bound: about H100's 2.44 * 1.1.
            inference_throughput=9.5,
            training_throughput=2.7,
            source="estimate from H100 (TIDE Fig. 14) and specs",
        ),
        GpuClass(
            name="H100",
            vendor=Vendor.NVIDIA,
            resource_name="nvidia.com/gpu",
            memory_mib=81559,
            node_labels=(
                LabelRequirement(
                    key=_GFD,
                    values=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H100-NVL"),
                ),
            ),
            inference_throughput=6.76,
            training_throughput=2.44,
            source="TIDE Fig. 14 (measured vs MI250)",
        ),
        GpuClass(
            name="MI300X",
            vendor=Vendor.AMD,
            resource_name="amd.com/gpu",
            memory_mib=196608,
            node_labels=(
                LabelRequirement(key=_AMD_DEVICE, values=("74a1",)),
                LabelRequirement(key=_AMD_PRODUCT, values=("AMD_Instinct_MI300X", "AMD_Instinct_MI300X_OAM")),
            ),
            inference_throughput=4.42,
            training_throughput=1.77,
            source="TIDE Fig. 14 (measured vs MI250)",
        ),
        GpuClass(
            name="A100",
            vendor=Vendor.NVIDIA,
            resource_name="nvidia.com/gpu",
            memory_mib=81920,
            node_labels=(
                LabelRequirement(
                    key=_GFD,
                    values=(
                        "NVIDIA-A100-SXM4-80GB",
                        "NVIDIA-A100-80GB-PCIe",
                        "NVIDIA-A100-SXM4-40GB",
                        "NVIDIA-A100-PCIE-40GB",
                    ),
                ),
            ),
            # Estimate: LLM serving on H100 runs about 2.5x an A100 (bandwidth 3.35 vs 2.0 TB/s plus FP8
            # and larger batches): 6.76 / 2.5. Training: bf16 dense 312 vs 989 TFLOPS, about 2.3x
            # in practice: 2.44 / 2.3, on a par with MI250 (362 TFLOPS peak, lower utilisation).
            inference_throughput=2.7,
            training_throughput=1.05,
            source="estimate from H100 (TIDE Fig. 14) and specs",
        ),
        GpuClass(
            name="L40S",
            vendor=Vendor.NVIDIA,
            resource_name="nvidia.com/gpu",
            memory_mib=46068,
            node_labels=(LabelRequirement(key=_GFD, values=("NVIDIA-L40S",)),),
            # Estimate: GDDR6 at 0.86 TB/s limits decode to roughly 0.3x an H100 (6.76 * 0.3); 48 GB
            # and no NVLink make training about 0.8 of an MI250.
            inference_throughput=2.0,
            training_throughput=0.8,
            source="estimate from H100 (TIDE Fig. 14) and specs",
        ),
        GpuClass(
            name="MI250",
            vendor=Vendor.AMD,
            resource_name="amd.com/gpu",
            memory_mib=65536,
            node_labels=(
                LabelRequirement(key=_AMD_DEVICE, values=("740c",)),
                LabelRequirement(key=_AMD_PRODUCT, values=("AMD_Instinct_MI250X_MI250", "AMD_Instinct_MI250")),
            ),
            # The reference of TIDE Fig. 14. The device plugin exposes each of an MI250's two dies
            # as one amd.com/gpu of 64 GiB.
            inference_throughput=1.0,
            training_throughput=1.0,
            source="TIDE Fig. 14 (reference)",
        ),
    )
)
