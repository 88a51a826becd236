"""Runs the Argo CD health check over its table (health_test.yaml, Argo CD's upstream format) with lupa
(Lua 5.x, as Argo CD's gopher-lua is 5.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

lupa = pytest.importorskip("lupa")

REPO = Path(__file__).resolve().parents[3]
CHECK_DIR = REPO / "argocd" / "resource_customizations" / "tide.dev" / "TideDeployment"
HEALTH_LUA = (CHECK_DIR / "health.lua").read_text()
TABLE = yaml.safe_load((CHECK_DIR / "health_test.yaml").read_text())["tests"]


def health(obj: dict[str, Any]) -> dict[str, str]:
    """Evaluate health.lua the way Argo CD does: `obj` is a global, the chunk returns a table."""
    runtime = lupa.LuaRuntime(unpack_returned_tuples=True)
    runtime.globals().obj = _to_lua(runtime, obj)
    result = runtime.execute(HEALTH_LUA)
    return {"status": result["status"], "message": result["message"]}


def _to_lua(runtime: Any, value: Any) -> Any:
    if isinstance(value, dict):
        return runtime.table_from({k: _to_lua(runtime, v) for k, v in value.items()})
    if isinstance(value, list):
        return runtime.table_from([_to_lua(runtime, v) for v in value])
    return value


@pytest.mark.parametrize("case", TABLE, ids=[Path(c["inputPath"]).stem for c in TABLE])
def test_health_table(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((CHECK_DIR / case["inputPath"]).read_text())
    assert health(obj) == case["healthStatus"]


def test_table_covers_every_lifecycle_phase_as_healthy() -> None:
    from tide_operator.api.status import Phase

    healthy = {yaml.safe_load((CHECK_DIR / c["inputPath"]).read_text())["status"]["phase"]
               for c in TABLE if c["healthStatus"]["status"] == "Healthy"}
    assert {Phase.SERVING, Phase.COLLECTING, Phase.TRAINING, Phase.CANARY} <= healthy


def test_the_paused_field_the_check_reads_is_the_crds() -> None:
    """health.lua reads obj.spec.control.paused (the paused cases of the table): the CRD must call it that."""
    crd = yaml.safe_load((REPO / "crds" / "tidedeployment.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["control"]["properties"]["paused"]["type"] == "boolean"
    suspended = [c for c in TABLE if c["healthStatus"]["status"] == "Suspended"]
    assert suspended, "the table has no paused (Suspended) case"


def test_argocd_cm_snippet_carries_the_same_lua() -> None:
    snippet = yaml.safe_load((REPO / "argocd" / "argocd-cm.yaml").read_text())
    assert snippet["data"]["resource.customizations.health.tide.dev_TideDeployment"] == HEALTH_LUA


def test_example_application_ignores_replicas_and_skips_dry_run() -> None:
    docs = list(yaml.safe_load_all((REPO / "examples" / "argocd-application.yaml").read_text()))
    crs = next(d for d in docs if d["metadata"]["name"] == "llm-chat")
    assert "SkipDryRunOnMissingResource=true" in crs["spec"]["syncPolicy"]["syncOptions"]
    assert crs["spec"]["ignoreDifferences"][0]["jsonPointers"] == ["/spec/inference/replicas"]


def test_the_status_of_a_pool_without_capacity_is_progressing_never_degraded() -> None:
    """The status a real pass writes with zero GPU nodes (an autoscaled pool at zero), through the check."""
    from tide_operator.adapters.cluster import Applied
    from tide_operator.config import OperatorConfig, StorageConfig
    from tide_operator.control.placement import NodeInventory
    from tide_operator.reconcile import reconcile

    class NoGpuCluster:
        def node_inventory(self, exclude: Any = None) -> list[NodeInventory]:
            return [NodeInventory("cpu-0", {}, {})]

        def read(self, kind: str, namespace: str, name: str) -> None:
            return None

        def apply(self, desired: dict[str, Any], live: Any = None) -> Applied:
            return Applied(desired["kind"], desired["metadata"]["name"], "created")

        def deployment(self, namespace: str, name: str) -> dict[str, Any]:
            return {"status": {"readyReplicas": 0}}

        def disruption_budget_api_version(self) -> str:
            return "policy/v1"

    body = {"metadata": {"name": "chat", "namespace": "llm", "uid": "u", "generation": 1},
            "spec": {"target": {"model": "m", "revision": "r"}, "draft": {"initial": "s3://tide/drafts/base"},
                     "inference": {"replicas": 2, "gpusPerReplica": 8}, "storage": {"s3": {"bucket": "tide"}}}}
    config = OperatorConfig(storage=StorageConfig(buckets=("tide",)))
    status = reconcile(body, NoGpuCluster(), config, adopt=lambda c: c).status  # type: ignore[arg-type]
    verdict = health({**body, "status": status})
    assert verdict["status"] == "Progressing"
    assert verdict["message"].startswith("WaitingForCapacity: inference on H200")
    assert "need 2 x 8 GPUs" in verdict["message"]
