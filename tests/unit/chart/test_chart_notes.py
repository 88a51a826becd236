"""NOTES.txt works after `helm install` of a packaged chart: no repository paths, kubectl commands,
and the TideDeployment it shows is one the CRD and the operator accept."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from chart_render import EVERYTHING_ON, NAMESPACE, chart, notes, only, render

from tide_operator.api import parse_spec
from tide_operator.config import load_operator_config
from tide_operator.control.storage_tenancy import storage_violations

pytest.importorskip("helm_python")

CASES = [{}, {"crds": {"enabled": False}}, {"metrics": {"podMonitor": {"enabled": True}}}, EVERYTHING_ON]
# A checkout's folder (not a URL's path, such as the runbooks link) or a script.
REPOSITORY_PATH = re.compile(r"(?<![\w./-])(examples|hack|crds|charts|docs|e2e|tests)/|\.py\b")


@pytest.mark.parametrize("values", CASES)
def test_notes_name_no_repository_path(values: dict[str, Any]) -> None:
    text = notes(values)
    assert not REPOSITORY_PATH.findall(text), text
    assert "kubectl explain tidedeployment" in text


def _manifest(text: str) -> dict[str, Any]:
    match = re.search(r"kubectl apply -f - <<EOF\n(.*?)\n\s*EOF", text, flags=re.DOTALL)
    assert match, text
    lines = match.group(1).splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    return yaml.safe_load("\n".join(line[indent:] for line in lines))


def test_the_example_tidedeployment_is_accepted_with_the_default_values() -> None:
    from tests.unit.api.crd_harness import api_server_verdict

    body = _manifest(notes())
    assert (body["apiVersion"], body["kind"]) == ("tide.dev/v1alpha1", "TideDeployment")
    assert api_server_verdict(body["spec"], body["metadata"]["name"]) == []
    config = load_operator_config(yaml.safe_load(only(render(), "ConfigMap")["data"]["config.yaml"]))
    spec = parse_spec(body["spec"], known_gpu_classes=config.catalog.names())
    meta = body["metadata"]
    assert storage_violations(spec, meta["namespace"], meta["name"], config.storage) == []


def test_without_the_crd_the_notes_install_it_from_the_chart_itself() -> None:
    text = notes({"crds": {"enabled": False}})
    assert "--show-only templates/crds.yaml" in text
    assert "kubectl apply --server-side" in text
    rendered = chart().render({"crds": {"enabled": True}}, name="tide", namespace=NAMESPACE, is_install=True)
    assert yaml.safe_load(rendered["tide-operator/templates/crds.yaml"])["kind"] == "CustomResourceDefinition"
