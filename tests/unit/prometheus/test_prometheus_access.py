"""Which Prometheus a spec may name, whose credentials go where, and how they are sent."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tide_operator.adapters.prometheus_adapter import AdapterConfig, PrometheusAdapter, PrometheusAdapters
from tide_operator.adapters.prometheus_credentials import prometheus_refusal, resolve_connection
from tide_operator.api import parse_spec
from tide_operator.api.spec_workload import PrometheusSpec
from tide_operator.catalog import ConfigError
from tide_operator.config import OperatorConfig, load_operator_config
from tide_operator.control.prometheus_access import (
    CredentialsError,
    PrometheusAuth,
    PrometheusConnection,
    auth_from_secret,
    connection_plan,
    prometheus_violations,
    same_url,
    split_userinfo,
    url_violation,
)
from tide_operator.reconcile import reconcile

OPERATOR_URL = "http://prometheus-operated.monitoring:9090"
ALLOWING = load_operator_config({"prometheus": {"allowedUrls": ["https://prom.team-a.example:9443/tenants/a",
                                                                "http://thanos.monitoring:10902"]}})


def _prometheus(**fields: Any) -> PrometheusSpec:
    return PrometheusSpec.model_validate(fields)


@pytest.mark.parametrize(("url", "refused"), [
    (OPERATOR_URL, None),
    (OPERATOR_URL + "/", None),
    ("HTTP://Prometheus-Operated.monitoring:9090", None),
    ("https://prom.team-a.example:9443/tenants/a", None),
    ("https://prom.team-a.example:9443/tenants/a/", None),
    ("https://prom.team-a.example:9443/tenants/a/eu", None),
    ("http://thanos.monitoring:10902/any/path", None),
    ("http://thanos.monitoring/", "not under"),  # port 80, not 10902
    ("https://prom.team-a.example:9443/tenants/ab", "not under"),  # a sibling path, not below
    ("https://prom.team-a.example:9443/tenants/b", "not under"),
    ("https://prom.team-a.example:9443/tenants/a/../b", ". or .."),
    ("https://prom.team-a.example:9443/tenants/a/%2e%2e/b", ". or .."),
    ("https://prom.team-a.example.evil.net:9443/tenants/a", "not under"),
    ("https://evil.net:9443/tenants/a#@prom.team-a.example", "no query or fragment"),
    ("http://thanos.monitoring:10902@evil.net/", "credentials do not go in the URL"),
    ("https://u:p@prom.team-a.example:9443/tenants/a", "credentials do not go in the URL"),
    ("https://prom.team-a.example:9443/tenants/a?x=1", "no query"),
    ("https://prom.team-a.example:notaport/", "not a URL"),
    ("http://169.254.169.254/latest/meta-data", "not under"),
])
def test_spec_urls_must_lie_under_an_allowed_prefix(url: str, refused: str | None) -> None:
    why = url_violation(url, ALLOWING)
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_an_empty_allowlist_admits_only_the_operator_url() -> None:
    config = OperatorConfig()
    assert prometheus_violations(_prometheus(), config) == []
    assert prometheus_violations(_prometheus(url=OPERATOR_URL), config) == []
    ((field, message),) = prometheus_violations(_prometheus(url="https://other:9090"), config)
    assert field == "spec.prometheus.url"
    assert message == ("https://other:9090 is not under a Prometheus URL the operator allows "
                       "(prometheus.allowedUrls: none besides the default Prometheus)")


def test_split_userinfo_and_same_url() -> None:
    url, auth = split_userinfo("https://ops:p%40ss@prom:9090/x")
    assert url == "https://prom:9090/x"
    assert (auth.username, auth.password) == ("ops", "p@ss")
    assert same_url("https://prom/x/", "https://PROM:443/x")
    assert not same_url("https://prom/x", "http://prom/x")


def test_operator_credentials_go_only_to_the_operator_url() -> None:
    config = load_operator_config({"prometheusUrl": "http://ops:pw@prom:9090",
                                   "prometheus": {"allowedUrls": ["https://tenant-prom"]}})
    default = connection_plan(_prometheus(), config)
    assert (default.url, default.operator_credentials, default.secret) == ("http://prom:9090", True, None)
    assert connection_plan(_prometheus(url="http://prom:9090/"), config).operator_credentials
    tenant = connection_plan(_prometheus(url="https://tenant-prom"), config)
    assert (tenant.operator_credentials, tenant.secret) == (False, None)
    own = connection_plan(_prometheus(url="https://tenant-prom", credentialsSecret="prom-auth"), config)
    assert (own.operator_credentials, own.secret) == (False, "prom-auth")
    # A tenant Secret on the operator URL replaces the operator's credentials, never adds to them.
    assert not connection_plan(_prometheus(credentialsSecret="prom-auth"), config).operator_credentials
    with pytest.raises(CredentialsError, match=r"spec\.prometheus\.url"):
        connection_plan(_prometheus(url="https://elsewhere"), config)


def test_auth_headers_and_their_secrets() -> None:
    basic = PrometheusAuth("alice", "pw")
    assert basic.headers() == {"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()}
    assert PrometheusAuth(token="t0k").headers() == {"Authorization": "Bearer t0k"}
    assert PrometheusAuth().headers() == {}
    assert set(basic.secrets()) == {"pw", basic.headers()["Authorization"]}
    connection = PrometheusConnection("https://p", PrometheusAuth("alice", "pw", None), ca_pem="PEM")
    assert "pw" not in repr(connection)
    assert "PEM" not in repr(connection)


@pytest.mark.parametrize(("data", "error"), [
    ({"token": "t", "password": "p", "username": "u"}, "both"),
    ({"username": "u"}, "go together"),
    ({"password": "p"}, "go together"),
])
def test_an_ambiguous_secret_is_refused(data: dict[str, str], error: str) -> None:
    with pytest.raises(CredentialsError, match=error):
        auth_from_secret(data, "spec.prometheus.credentialsSecret: Secret a/b")


def _secrets(data: Mapping[str, str] | ApiException) -> Any:
    def read(namespace: str, name: str) -> Mapping[str, str]:
        assert (namespace, name) == ("team-a", "prom-auth")
        if isinstance(data, ApiException):
            raise data
        return data

    return read


def test_a_tenant_secret_gives_its_auth_and_ca_and_names_its_owner() -> None:
    spec = _prometheus(url="https://tenant-prom", credentialsSecret="prom-auth")
    config = load_operator_config({"prometheus": {"allowedUrls": ["https://tenant-prom"]}})
    got = resolve_connection("team-a", spec, config, _secrets({"token": "t0k\n", "ca.crt": "PEM"}))
    assert got == PrometheusConnection("https://tenant-prom", PrometheusAuth(token="t0k"), ca_pem="PEM",
                                       credentials_owner="team-a/prom-auth")
    denied = ApiException(status=403, reason="Forbidden")
    denied.body = '{"message": "secret body with hunter2"}'
    with pytest.raises(CredentialsError) as err:
        resolve_connection("team-a", spec, config, _secrets(denied))
    assert str(err.value) == "spec.prometheus.credentialsSecret: Secret team-a/prom-auth: 403 Forbidden"


def test_operator_credentials_come_from_files_or_the_legacy_url(tmp_path: Path) -> None:
    (tmp_path / "user").write_text("ops\n")
    (tmp_path / "pass").write_text("pw\n")
    config = load_operator_config({"prometheusUrl": "https://prom:9090", "prometheus": {
        "caFile": "/etc/tide/prometheus/ca.crt", "usernameFile": str(tmp_path / "user"),
        "passwordFile": str(tmp_path / "pass")}})
    got = resolve_connection("team-a", _prometheus(), config, _secrets({}))
    assert got == PrometheusConnection("https://prom:9090", PrometheusAuth("ops", "pw"),
                                       ca_file="/etc/tide/prometheus/ca.crt", credentials_owner="operator")
    legacy = load_operator_config({"prometheusUrl": "http://ops:pw@prom:9090"})
    assert resolve_connection("team-a", _prometheus(), legacy, _secrets({})).auth == PrometheusAuth("ops", "pw")
    missing = load_operator_config({"prometheus": {"bearerTokenFile": str(tmp_path / "nope")}})
    with pytest.raises(CredentialsError, match=r"prometheus.bearerTokenFile .*nope: No such file"):
        resolve_connection("team-a", _prometheus(), missing, _secrets({}))


@pytest.mark.parametrize(("raw", "error"), [
    ({"usernameFile": "/u"}, "go together"),
    ({"usernameFile": "/u", "passwordFile": "/p", "bearerTokenFile": "/t"}, "not both"),
    ({"allowedUrls": ["prom.example.com"]}, "allowedUrls"),
    ({"allowedUrls": ["https://u:p@prom"]}, "allowedUrls"),
    ({"deploymentLabel": "tide.dev/deployment"}, "prometheus.deploymentLabel"),
])
def test_the_operator_configuration_is_checked(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load_operator_config({"prometheus": raw})


class UntouchedCluster:
    """Any call fails the test: a refused spec reaches nothing in the cluster."""

    def __getattr__(self, name: str) -> Any:
        def call(*_: Any) -> Any:
            raise AssertionError(f"the pass called cluster.{name}")

        return call


class SecretsAbsent:
    def secret_exists(self, namespace: str, name: str) -> bool:
        return False


def test_refusals_name_the_field_before_any_cluster_call() -> None:
    refused = prometheus_refusal(_prometheus(url="https://x"), "team-a", OperatorConfig(), UntouchedCluster())
    reason, ((field, _),) = refused or ("", [("", "")])
    assert (reason, field) == ("PrometheusNotAllowed", "spec.prometheus.url")
    assert prometheus_refusal(_prometheus(url=OPERATOR_URL), "team-a", OperatorConfig(), UntouchedCluster()) is None
    missing = prometheus_refusal(_prometheus(credentialsSecret="gone"), "team-a", OperatorConfig(), SecretsAbsent())
    assert missing == ("MissingCredentials", [("spec.prometheus.credentialsSecret", "Secret team-a/gone not found")])


def test_a_refused_url_makes_the_deployment_invalid_with_a_warning() -> None:
    spec = {"target": {"model": "m", "revision": "r"}, "storage": {"s3": {"bucket": "tide", "credentialsSecret": "s3"}},
            "prometheus": {"url": "http://169.254.169.254/latest"}}
    body = {"metadata": {"name": "chat", "namespace": "llm", "generation": 2}, "spec": spec}
    parse_spec(spec)  # valid as a spec: only the operator configuration refuses it
    result = reconcile(body, UntouchedCluster(), OperatorConfig(), adopt=lambda child: child)  # type: ignore[arg-type]
    assert result.status["phase"] == "Invalid"
    ready = next(c for c in result.status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PrometheusNotAllowed")
    assert ready["message"].startswith("spec.prometheus.url: http://169.254.169.254/latest is not under")
    (event,) = result.events
    assert (event.type, event.reason) == ("Warning", "PrometheusNotAllowed")


def test_adapters_are_shared_per_endpoint_owner_and_label_and_renewed_on_rotation() -> None:
    made: list[tuple[PrometheusConnection, str]] = []

    def factory(connection: PrometheusConnection, config: AdapterConfig) -> PrometheusAdapter:
        made.append((connection, config.labels.deployment))
        return PrometheusAdapter(connection, config, query=lambda q, t: [])

    adapters = PrometheusAdapters(factory=factory)
    a = PrometheusConnection("https://p/", PrometheusAuth(token="a1"), credentials_owner="team-a/prom")
    b = PrometheusConnection("https://p", PrometheusAuth(token="b1"), credentials_owner="team-b/prom")
    first = adapters.for_connection(a)
    assert adapters.for_connection(a) is first
    assert adapters.for_connection(b) is not first  # never a snapshot fetched with another tenant's token
    relabelled = adapters.for_connection(a, "tide_deployment")
    assert relabelled is not first
    assert 'tide_deployment!=""' in next(iter(relabelled.queries.values()))
    rotated = adapters.for_connection(PrometheusConnection("https://p", PrometheusAuth(token="a2"),
                                                           credentials_owner="team-a/prom"))
    assert rotated is not first
    assert adapters.for_connection(PrometheusConnection("https://p", PrometheusAuth(token="a2"),
                                                        credentials_owner="team-a/prom")) is rotated
    assert [label for _, label in made] == ["label_tide_dev_deployment"] * 2 + ["tide_deployment",
                                                                              "label_tide_dev_deployment"]
