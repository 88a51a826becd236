from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_render import CHART_DIR, EVERYTHING_ON, NAMESPACE, kinds, notes, only, render

from tide_operator.api.crd import crd, render_yaml
from tide_operator.config import LeaderElectionConfig, OperatorConfig, PodPolicyConfig, load_operator_config
from tide_operator.observability.dashboards import DASHBOARDS
from tide_operator.rbac import chart_rules_yaml, cluster_rules, namespaced_rbac, namespaced_rules, operator_rules

pytest.importorskip("helm_python")


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render()


@pytest.fixture(scope="module")
def everything() -> list[dict[str, Any]]:
    return render(EVERYTHING_ON)


def test_default_install_renders_the_operator_and_no_optional_parts(default: list[dict[str, Any]]) -> None:
    assert kinds(default) == sorted(["ClusterRole", "ClusterRoleBinding", "ConfigMap", "CustomResourceDefinition",
                                     "Deployment", "PodDisruptionBudget", "Role", "RoleBinding", "Service",
                                     "ServiceAccount"])
    assert all(o["metadata"].get("namespace", NAMESPACE) == NAMESPACE for o in default)


def test_operator_pod_is_non_root_read_only(default: list[dict[str, Any]]) -> None:
    deployment = only(default, "Deployment")["spec"]
    pod = deployment["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in container["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_operator_config_is_mounted_and_named_by_the_environment(default: list[dict[str, Any]]) -> None:
    container = only(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    config_map = only(default, "ConfigMap")
    path = Path(env["TIDE_OPERATOR_CONFIG"])
    assert path.parent == Path(mount["mountPath"])
    raw = yaml.safe_load(config_map["data"][path.name])
    # The values the chart fills in: its own ServiceAccount, which TideDeployment pods may not use, and
    # the leader Lease's name (the release's, as its Role names it).
    own_account = only(default, "ServiceAccount")["metadata"]["name"]
    release_name = only(default, "Deployment")["metadata"]["name"]
    expected = OperatorConfig(pod_policy=PodPolicyConfig(operator_service_account=own_account),
                              leader_election=LeaderElectionConfig(lease_name=release_name))
    assert load_operator_config(raw) == expected, "chart defaults drifted from tide_operator.config"


def test_a_configured_operator_service_account_is_kept() -> None:
    config_map = only(render({"config": {"podPolicy": {"operatorServiceAccount": "elsewhere"}}}), "ConfigMap")
    raw = yaml.safe_load(config_map["data"]["config.yaml"])
    assert load_operator_config(raw).pod_policy.operator_service_account == "elsewhere"


def test_cluster_role_renders_exactly_the_operator_rules(default: list[dict[str, Any]]) -> None:
    assert only(default, "ClusterRole")["rules"] == operator_rules()
    binding = only(default, "ClusterRoleBinding")
    account = only(default, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}]
    assert binding["roleRef"]["name"] == only(default, "ClusterRole")["metadata"]["name"]


def test_watched_namespaces_get_roles_and_only_cluster_wide_reads_stay_cluster_wide() -> None:
    objects = render({"watchNamespaces": ["a", "b"]})
    rbac_objects = [o for o in objects if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
                    and not o["metadata"]["name"].endswith("-leader-election")]
    account = only(objects, "ServiceAccount")["metadata"]
    subject = {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    name = only(objects, "ClusterRole")["metadata"]["name"]
    # The same objects the namespaced integration test binds its operator with, labels aside.
    expected = namespaced_rbac(["a", "b"], subject, name)
    assert [{k: v for k, v in o.items() if k != "metadata"} for o in rbac_objects] == \
        [{k: v for k, v in o.items() if k != "metadata"} for o in expected]
    assert [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in rbac_objects] == \
        [(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for o in expected]
    assert only(objects, "ClusterRole")["rules"] == cluster_rules()
    assert all(role["rules"] == namespaced_rules() for role in rbac_objects if role["kind"] == "Role")
    cluster_wide = {r for rule in cluster_rules() for r in rule["resources"]}
    assert "secrets" not in cluster_wide
    assert {v for rule in cluster_rules() for v in rule["verbs"]} == {"list", "watch"}


def test_chart_rbac_file_matches_rbac_py() -> None:
    path = CHART_DIR / "files" / "rbac" / "rules.yaml"
    assert path.read_text() == chart_rules_yaml(), (
        f"{path} drifted: `python -m tide_operator.rbac > {path.relative_to(CHART_DIR.parents[1])}`")


def test_crd_is_the_generated_one_kept_on_uninstall(default: list[dict[str, Any]]) -> None:
    rendered = only(default, "CustomResourceDefinition")
    assert rendered["spec"] == crd()["spec"]
    assert rendered["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert rendered["metadata"]["labels"]["app.kubernetes.io/part-of"] == "tide-operator"


def test_chart_crd_file_matches_the_models() -> None:
    path = CHART_DIR / "files" / "crds" / "tidedeployment.yaml"
    assert path.read_text() == render_yaml(crd()), (
        f"{path} drifted: `python -m tide_operator.api.crd > {path.relative_to(CHART_DIR.parents[1])}`")


def test_crds_can_be_left_to_someone_else() -> None:
    objects = render({"crds": {"enabled": False}})
    assert "CustomResourceDefinition" not in kinds(objects)
    assert "kubectl apply --server-side" in notes({"crds": {"enabled": False}})


def test_everything_on_renders_every_optional_part(everything: list[dict[str, Any]]) -> None:
    counts = {kind: kinds(everything).count(kind) for kind in set(kinds(everything))}
    assert counts["ServiceMonitor"] == 1
    assert counts["PodMonitor"] == 1
    assert counts["PrometheusRule"] == 1
    assert counts["NetworkPolicy"] == 2
    assert counts["Role"] == counts["RoleBinding"] == len(EVERYTHING_ON["watchNamespaces"]) + 1  # + the Lease's
    assert counts["ConfigMap"] == 1 + len(DASHBOARDS)
    assert "helm.sh/resource-policy" not in only(everything, "CustomResourceDefinition")["metadata"]["annotations"]


def test_non_default_values_reach_the_pod(everything: list[dict[str, Any]]) -> None:
    pod = only(everything, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.example/tide-operator:0.2.0"
    assert {"--namespace=llm", "--namespace=batch", "--verbose"} <= set(container["args"])
    assert pod["serviceAccountName"] == "tide"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "system-cluster-critical"
    config_map = next(o for o in everything if o["kind"] == "ConfigMap" and "config.yaml" in o["data"])
    config = load_operator_config(yaml.safe_load(config_map["data"]["config.yaml"]))
    assert config.catalog.names() == ("B200",)
    assert config.resync_interval_seconds == 10


def test_monitoring_objects_carry_selector_labels(everything: list[dict[str, Any]]) -> None:
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert only(everything, kind)["metadata"]["labels"]["release"] == "kps"
    service = only(everything, "Service")
    monitor = only(everything, "ServiceMonitor")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    pod_monitor = only(everything, "PodMonitor")["spec"]
    assert pod_monitor["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "tide-operator",
                                                      "app.kubernetes.io/component": "inference"}
    relabel = pod_monitor["podMetricsEndpoints"][0]["relabelings"][0]
    assert relabel["targetLabel"] == "label_tide_dev_deployment"


def test_prometheus_rule_is_the_rules_file(everything: list[dict[str, Any]]) -> None:
    """The rules file as it is, plus each alert's runbook_url (test_chart_runbooks.py)."""
    rules_file = yaml.safe_load((CHART_DIR / "files" / "alerts" / "tide-rules.yaml").read_text())
    spec = copy.deepcopy(only(everything, "PrometheusRule")["spec"])
    for group in spec["groups"]:
        for rule in group["rules"]:
            rule.get("annotations", {}).pop("runbook_url", None)
    assert spec == rules_file


def test_dashboards_are_labelled_for_the_grafana_sidecar(everything: list[dict[str, Any]]) -> None:
    boards = [o for o in everything if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard")]
    assert len(boards) == len(DASHBOARDS)
    for board in boards:
        assert board["metadata"]["namespace"] == "monitoring"
        assert board["metadata"]["annotations"]["grafana_folder"] == "TIDE"
        (text,) = board["data"].values()
        assert json.loads(text)["uid"]


def test_network_policy_admits_only_operator_prometheus_and_clients(everything: list[dict[str, Any]]) -> None:
    policies = [o for o in everything if o["kind"] == "NetworkPolicy"]
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["batch", "llm"]
    operator_labels = only(everything, "Deployment")["spec"]["selector"]["matchLabels"]
    rule, control = policies[0]["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    operator_peer, prometheus_peer, client_peer = rule["from"]
    assert operator_peer["podSelector"]["matchLabels"] == operator_labels
    assert operator_peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": NAMESPACE}
    assert prometheus_peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert client_peer == {"podSelector": {"matchLabels": {"app": "gateway"}}}
    # The control routes' own port (named in the serving pod): the operator and no one else.
    assert control == {"ports": [{"port": "tide-control", "protocol": "TCP"}], "from": [operator_peer]}


def test_config_change_rolls_the_operator_pod() -> None:
    def checksum(values: dict[str, Any]) -> str:
        return only(render(values), "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) != checksum({"config": {"resyncIntervalSeconds": 60}})


def test_metrics_port_reaches_the_operator_through_its_environment(default: list[dict[str, Any]]) -> None:
    from tide_operator.metrics import PORT_ENV

    container = only(default, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert int(env[PORT_ENV]) == ports["metrics"]
    service_port = only(default, "Service")["spec"]["ports"][0]
    assert service_port["targetPort"] == "metrics"
