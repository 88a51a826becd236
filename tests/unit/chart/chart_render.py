"""Rendering the chart offline with helm-python-sdk (Helm v4 as a library; no `helm` binary needed)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[3]
CHART_DIR = REPO / "charts" / "tide-operator"
RELEASE, NAMESPACE = "tide", "tide-system"


@cache
def chart() -> Any:
    import helm_python

    return helm_python.Chart.load(str(CHART_DIR))


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders with ``values`` (NOTES.txt left out)."""
    manifests = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    for path, text in sorted(manifests.items()):
        if not path.endswith(".txt"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def notes(values: dict[str, Any] | None = None) -> str:
    manifests = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def kinds(objects: list[dict[str, Any]]) -> list[str]:
    return sorted(o["kind"] for o in objects)


# Values that switch every optional part on and change the defaults a user is likely to change.
EVERYTHING_ON: dict[str, Any] = {
    "watchNamespaces": ["llm", "batch"],
    "verbose": True,
    "crds": {"enabled": True, "keep": False},
    "serviceAccount": {"create": True, "name": "tide", "annotations": {"eks.amazonaws.com/role-arn": "arn:x"}},
    "image": {"repository": "registry.example/tide-operator", "tag": "0.2.0", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "config": {"prometheusUrl": "http://prometheus.mon:9090", "resyncIntervalSeconds": 10,
               "gpuClasses": [{"name": "B200", "vendor": "nvidia", "resourceName": "nvidia.com/gpu",
                               "memoryMiB": 183359,
                               "nodeLabels": [{"key": "nvidia.com/gpu.product", "values": ["NVIDIA-B200"]}],
                               "inferenceThroughput": 14, "trainingThroughput": 5}]},
    "metrics": {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}},
                "podMonitor": {"enabled": True, "namespaces": ["llm"], "additionalLabels": {"release": "kps"}}},
    "prometheusRule": {"enabled": True, "additionalLabels": {"release": "kps"}},
    "dashboards": {"enabled": True, "namespace": "monitoring"},
    "networkPolicy": {"enabled": True, "servingNamespaces": ["llm", "batch"],
                      "clientPeers": [{"podSelector": {"matchLabels": {"app": "gateway"}}}]},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}],
    "priorityClassName": "system-cluster-critical",
}
