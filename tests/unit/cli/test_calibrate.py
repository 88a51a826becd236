"""`tide calibrate`: measurements -> the ConfigMap the TideDeployment's costProfile.configMapRef names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tide_operator.adapters.cost_profile_source import parse_profile
from tide_operator.cli import calibrate
from tide_operator.cli.__main__ import main, parser
from tide_operator.control.calibration import Sweep, SweepPoint, cost_points, spec_points, sweep_to_json


def saved_sweep(tmp_path: Path) -> tuple[Path, Sweep]:
    points = []
    for b in (1, 4, 16):
        target = 0.01 + 0.001 * b
        points.append(SweepPoint(b, False, b * 60, 60 * target))
        drafts = b * 60 / 2.0
        points.append(SweepPoint(b, True, b * 60, 30 * (0.006 + 0.01 + 0.004 * b), drafts, drafts * 3, drafts))
    sweep = Sweep(tuple(points), 3)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep_to_json(sweep)))
    return path, sweep


def test_dry_run_prints_the_config_map_the_operator_reads(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path, sweep = saved_sweep(tmp_path)
    code = main(["calibrate", "--measurements", str(path), "--config-map", "chat-profile", "-n", "llm", "--dry-run"])
    assert code == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    assert manifest["metadata"] == {"name": "chat-profile", "namespace": "llm"}
    expected = spec_points(cost_points(sweep))
    parsed = parse_profile(manifest["data"][calibrate.DEFAULT_KEY])
    assert parsed == tuple((p["batchSize"], p["draftCostPermille"], p["verifyCostPercent"]) for p in expected)


def test_the_config_map_and_key_come_from_the_deployments_ref(tmp_path: Path, monkeypatch) -> None:
    path, _ = saved_sweep(tmp_path)
    deployment = {"spec": {"control": {"costProfile": {"configMapRef": {"name": "measured", "key": "cost"}}}}}
    monkeypatch.setattr("tide_operator.cli.kube.read_tide_deployment", lambda api, ns, name: deployment)
    written = []
    monkeypatch.setattr(calibrate, "write_config_map", lambda api, manifest: written.append(manifest) or "updated")
    args = parser().parse_args(["calibrate", "chat", "--measurements", str(path)])
    line = calibrate.run_calibrate(args, object(), "llm")
    assert line == "ConfigMap llm/measured updated: key cost, 3 points\n"
    assert written[0]["metadata"] == {"name": "measured", "namespace": "llm"}
    assert len(parse_profile(written[0]["data"]["cost"])) == 3


def test_no_config_map_named_is_an_error_not_a_traceback(tmp_path: Path, monkeypatch, capsys) -> None:
    path, _ = saved_sweep(tmp_path)
    monkeypatch.setattr("tide_operator.cli.kube.read_tide_deployment", lambda api, ns, name: {"spec": {}})
    monkeypatch.setattr("tide_operator.cli.kube.api_client", lambda kubeconfig, context: object())
    assert main(["calibrate", "chat", "--measurements", str(path), "-n", "llm"]) == 1
    assert "no ConfigMap" in capsys.readouterr().err


class FakeCore:
    def __init__(self, existing: set[str]) -> None:
        self.existing, self.calls = existing, []

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict) -> None:
        from kubernetes.client.rest import ApiException

        if name not in self.existing:
            raise ApiException(status=404)
        self.calls.append(("patch", name, body))

    def create_namespaced_config_map(self, namespace: str, body: dict) -> None:
        self.calls.append(("create", body["metadata"]["name"], body))


@pytest.mark.parametrize(("existing", "verb"), [({"p"}, "updated"), (set(), "created")])
def test_an_existing_config_map_gets_only_its_key_patched(monkeypatch, existing: set[str], verb: str) -> None:
    core = FakeCore(existing)
    monkeypatch.setattr("kubernetes.client.CoreV1Api", lambda api: core)
    manifest = calibrate.config_map("llm", "p", "k", [{"batchSize": 1, "draftCostPermille": 100,
                                                       "verifyCostPercent": 110}])
    assert calibrate.write_config_map(object(), manifest) == verb
    kind, name, body = core.calls[-1]
    assert name == "p"
    assert body["data"] == manifest["data"] if kind == "patch" else body == manifest
