"""A table of specs, each valid or invalid with the field ``parse_spec`` must name.

Shared by the parse_spec tests and the CRD agreement tests: every row must get the same verdict
from parse_spec and from the API server (OpenAPI schema + CEL).
"""

from __future__ import annotations

import copy
from typing import Any

MINIMAL: dict[str, Any] = {
    "target": {"model": "meta-llama/Llama-3.1-8B", "revision": "0e9e39f"},
    "storage": {"s3": {"bucket": "tide"}},
}


def with_fields(**dotted: Any) -> dict[str, Any]:
    """MINIMAL with fields set by dotted path (``inference__replicas=3`` sets spec.inference.replicas)."""
    spec = copy.deepcopy(MINIMAL)
    for path, value in dotted.items():
        node = spec
        *parents, leaf = path.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return spec


POINT = {"batchSize": 1, "draftCostPermille": 50, "verifyCostPercent": 110}

# (case id, spec, None when valid else the field path parse_spec must name)
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("minimal", MINIMAL, None),
    ("replicas zero", with_fields(inference__replicas=0), None),
    ("tp equals gpus", with_fields(target__tensorParallelSize=4, inference__gpusPerReplica=4), None),
    ("tp divides gpus", with_fields(target__tensorParallelSize=2, inference__gpusPerReplica=8), None),
    ("canary below replicas", with_fields(inference__replicas=3, control__canary={"replicas": 2}), None),
    ("one replica canary", with_fields(inference__replicas=1, control__canary={"replicas": 1}), None),
    ("cost points", with_fields(control__costProfile={"points": [POINT]}), None),
    (
        "cost configmap",
        with_fields(control__costProfile={"configMapRef": {"name": "costs", "key": "h100"}}),
        None,
    ),
    (
        "kms with key",
        with_fields(control__capture={"serverSideEncryption": "aws:kms", "kmsKeyId": "arn:k"}),
        None,
    ),
    (
        "allowed extra args",
        with_fields(inference__extraArgs=["--max-model-len", "8192", "--model-loader-extra-config", "{}"]),
        None,
    ),
    (
        "tolerations",
        with_fields(inference__tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        None,
    ),
    (
        "resources int and string",
        with_fields(inference__resources={"limits": {"cpu": 8, "memory": "64Gi"}}),
        None,
    ),
    ("override opaque", with_fields(inference__podTemplateOverride={"spec": {"hostIPC": True}}), None),
    ("durations", with_fields(control__interval="1m30s", control__drift={"shortHalfLife": "90s"}), None),
    ("draft pin", with_fields(control__draftPin="v12"), None),
    ("draft pool bound", with_fields(control__draftPool={"maxDrafts": 8}), None),
    (
        "s3 endpoint",
        with_fields(storage={"s3": {"bucket": "tide", "endpoint": "http://127.0.0.1:9000"}}),
        None,
    ),
    # invalid, one problem each
    ("missing target", {"storage": MINIMAL["storage"]}, "spec.target"),
    ("missing storage", {"target": MINIMAL["target"]}, "spec.storage"),
    ("missing revision", with_fields(target={"model": "m"}), "spec.target.revision"),
    ("replicas too many", with_fields(inference__replicas=65), "spec.inference.replicas"),
    ("replicas negative", with_fields(inference__replicas=-1), "spec.inference.replicas"),
    ("replicas as string", with_fields(inference__replicas="3"), "spec.inference.replicas"),
    ("replicas as float", with_fields(inference__replicas=2.5), "spec.inference.replicas"),
    ("unknown field", with_fields(inference__gpus=4), "spec.inference.gpus"),
    ("speculation enum", with_fields(control__speculation="Sometimes"), "spec.control.speculation"),
    ("draft method unsupported", with_fields(draft__method="eagle"), "spec.draft.method"),
    ("draft method unknown", with_fields(draft__method="medusa"), "spec.draft.method"),
    ("speculative tokens", with_fields(draft__numSpeculativeTokens=9), "spec.draft.numSpeculativeTokens"),
    ("bad duration", with_fields(control__interval="30 seconds"), "spec.control.interval"),
    ("float duration", with_fields(control__interval="1.5m"), "spec.control.interval"),
    ("interval too short", with_fields(control__interval="2s"), "spec.control.interval"),
    (
        "half lives reversed",
        with_fields(control__drift={"shortHalfLife": "1h", "longHalfLife": "30m"}),
        "spec.control.drift.shortHalfLife",
    ),
    (
        "bad bytes",
        with_fields(control__capture={"maxBufferBytes": "1.5Gi"}),
        "spec.control.capture.maxBufferBytes",
    ),
    (
        "threshold above buffer",
        with_fields(control__training={"sampleThreshold": 5000}),
        "spec.control.training.sampleThreshold",
    ),
    (
        "kms key without kms",
        with_fields(control__capture={"kmsKeyId": "arn:k"}),
        "spec.control.capture.kmsKeyId",
    ),
    (
        "sse enum",
        with_fields(control__capture={"serverSideEncryption": "aws:kms:dsse"}),
        "spec.control.capture.serverSideEncryption",
    ),
    ("cost profile empty", with_fields(control__costProfile={}), "spec.control.costProfile"),
    (
        "cost profile both",
        with_fields(control__costProfile={"points": [POINT], "configMapRef": {"name": "c", "key": "k"}}),
        "spec.control.costProfile",
    ),
    (
        "cost point bounds",
        with_fields(control__costProfile={"points": [{**POINT, "verifyCostPercent": 0}]}),
        "spec.control.costProfile.points[0].verifyCostPercent",
    ),
    (
        "tp does not divide",
        with_fields(target__tensorParallelSize=3, inference__gpusPerReplica=4),
        "spec.target.tensorParallelSize",
    ),
    (
        "tp above gpus",
        with_fields(target__tensorParallelSize=8, inference__gpusPerReplica=4),
        "spec.target.tensorParallelSize",
    ),
    (
        "canary as many as replicas",
        with_fields(inference__replicas=2, control__canary={"replicas": 2}),
        "spec.control.canary.replicas",
    ),
    ("denied --model", with_fields(inference__extraArgs=["--model", "x"]), "spec.inference.extraArgs[0]"),
    (
        "denied --port=",
        with_fields(inference__extraArgs=["--max-num-seqs", "64", "--port=9000"]),
        "spec.inference.extraArgs[2]",
    ),
    (
        "denied underscore",
        with_fields(inference__extraArgs=["--served_model_name=x"]),
        "spec.inference.extraArgs[0]",
    ),
    ("denied -tp glued", with_fields(inference__extraArgs=["-tp4"]), "spec.inference.extraArgs[0]"),
    ("denied -sc", with_fields(inference__extraArgs=["-sc", "{}"]), "spec.inference.extraArgs[0]"),
    (
        "denied worker extension",
        with_fields(inference__extraArgs=["--worker-extension-cls=x.Y"]),
        "spec.inference.extraArgs[0]",
    ),
    (
        "toleration operator",
        with_fields(inference__tolerations=[{"key": "k", "operator": "Sometimes"}]),
        "spec.inference.tolerations[0].operator",
    ),
    ("bucket name", with_fields(storage={"s3": {"bucket": "Tide_Bucket"}}), "spec.storage.s3.bucket"),
    ("draft pin format", with_fields(control__draftPin="latest"), "spec.control.draftPin"),
    ("draft pool empty", with_fields(control__draftPool={"maxDrafts": 0}), "spec.control.draftPool.maxDrafts"),
    (
        "sampling percent",
        with_fields(control__capture={"samplingPercent": 101}),
        "spec.control.capture.samplingPercent",
    ),
    ("port range", with_fields(inference__port=80), "spec.inference.port"),
    ("paused not bool", with_fields(control__paused="yes"), "spec.control.paused"),
    ("gpu classes not a list", with_fields(inference__gpuClasses="H100"), "spec.inference.gpuClasses"),
]
