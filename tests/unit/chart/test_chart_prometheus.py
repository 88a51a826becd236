"""The chart's Prometheus connection values: allowlist, CA and credential files, the deployment label."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from chart_render import chart, only, render

from tide_operator.config import load_operator_config

helm_python = pytest.importorskip("helm_python")

MOUNT = "/var/run/tide/prometheus"
VALUES: dict[str, Any] = {
    "prometheusCredentials": {"secretName": "prometheus-reader"},
    "metrics": {"podMonitor": {"enabled": True}},
    "config": {"prometheusUrl": "https://prometheus.monitoring:9090", "prometheus": {
        "allowedUrls": ["https://prometheus.team-a.example/"], "caFile": f"{MOUNT}/ca.crt",
        "bearerTokenFile": f"{MOUNT}/token", "deploymentLabel": "tide_deployment"}},
}


def _config(objects: list[dict[str, Any]]) -> Any:
    return load_operator_config(yaml.safe_load(only(objects, "ConfigMap")["data"]["config.yaml"]))


def test_a_credentials_secret_is_mounted_read_only_where_the_config_points() -> None:
    objects = render(VALUES)
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == MOUNT)
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"] == {"secretName": "prometheus-reader", "defaultMode": 0o440}
    config = _config(objects).prometheus
    assert config.allowed_urls == ("https://prometheus.team-a.example/",)
    assert (config.ca_file, config.bearer_token_file) == (f"{MOUNT}/ca.crt", f"{MOUNT}/token")
    relabel = only(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
    assert relabel["targetLabel"] == "tide_deployment"


def test_by_default_nothing_is_mounted_and_tls_is_verified() -> None:
    objects = render({"metrics": {"podMonitor": {"enabled": True}}})
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert all(m["mountPath"] != MOUNT for m in pod["containers"][0]["volumeMounts"])
    config = _config(objects).prometheus
    assert (config.allowed_urls, config.insecure_skip_tls_verify) == ((), False)
    relabel = only(objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["relabelings"][0]
    assert relabel["targetLabel"] == "label_tide_dev_deployment"


@pytest.mark.parametrize(("values", "named"), [
    ({"prometheusCredentials": {"secretName": "Not_A_Name"}}, "/prometheusCredentials/secretName"),
    ({"prometheusCredentials": {"secret": "x"}}, "secret"),
    ({"config": {"prometheus": {"allowedUrls": "https://one"}}}, "/config/prometheus/allowedUrls"),
    ({"config": {"prometheus": {"caFile": "/ca", "verifyTls": False}}}, "verifyTls"),
])
def test_the_values_schema_refuses_malformed_prometheus_values(values: dict[str, Any], named: str) -> None:
    with pytest.raises(helm_python.HelmError) as err:
        chart().validate_schema(values)
    assert named in str(err.value)
