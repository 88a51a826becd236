"""A TideDeployment's Prometheus connection with its credentials read (Kubernetes Secret, mounted files).

The decision (which URL, whose credentials) is `prometheus_access.connection_plan`; this module
only reads what the plan names: the tenant's Secret in the TideDeployment's namespace, or the
operator's files (re-read every pass, so a rotated Secret needs no restart). Nothing read here
is ever put into a message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from kubernetes.client.rest import ApiException

from tide_operator.api.conditions import Reason
from tide_operator.api.spec_workload import PrometheusSpec
from tide_operator.config import OperatorConfig, PrometheusConfig
from tide_operator.control.prometheus_access import (
    SECRET_FIELD,
    ConnectionPlan,
    CredentialsError,
    PrometheusAuth,
    PrometheusConnection,
    Violation,
    auth_from_secret,
    connection_plan,
    prometheus_violations,
    split_userinfo,
)

ReadSecret = Callable[[str, str], Mapping[str, str]]  # (namespace, name) -> decoded data
OPERATOR = "operator"


class SecretLookup(Protocol):
    def secret_exists(self, namespace: str, name: str) -> bool: ...


def prometheus_refusal(spec: PrometheusSpec, namespace: str, config: OperatorConfig,
                       cluster: SecretLookup) -> tuple[str, list[Violation]] | None:
    """(reason, [(field, message)]) when the spec's Prometheus is refused: checked before any query,
    and the cluster is asked only about a Secret the spec names."""
    refused = prometheus_violations(spec, config)
    if refused:
        return Reason.PROMETHEUS_NOT_ALLOWED, refused
    if spec.credentials_secret and not cluster.secret_exists(namespace, spec.credentials_secret):
        return Reason.MISSING_CREDENTIALS, [(SECRET_FIELD, f"Secret {namespace}/{spec.credentials_secret} not found")]
    return None


def resolve_connection(namespace: str, spec: PrometheusSpec, config: OperatorConfig,
                       read_secret: ReadSecret) -> PrometheusConnection:
    """Raises CredentialsError naming the field or file when the credentials cannot be used."""
    plan = connection_plan(spec, config)
    if plan.secret:
        return _from_secret(plan, namespace, plan.secret, read_secret)
    if plan.operator_credentials:
        return _from_operator(plan, config)
    return PrometheusConnection(plan.url)  # a spec URL without a Secret: no credentials, system CAs


def _from_secret(plan: ConnectionPlan, namespace: str, name: str, read_secret: ReadSecret) -> PrometheusConnection:
    where = f"{SECRET_FIELD}: Secret {namespace}/{name}"
    try:
        data = read_secret(namespace, name)
    except ApiException as err:  # the body may quote the object: status and reason only
        raise CredentialsError(f"{where}: {err.status} {err.reason}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"{where}: a value is not UTF-8 text") from None
    auth, ca_pem = auth_from_secret(data, where)
    return PrometheusConnection(plan.url, auth, ca_pem=ca_pem, credentials_owner=f"{namespace}/{name}")


def _from_operator(plan: ConnectionPlan, config: OperatorConfig) -> PrometheusConnection:
    settings = config.prometheus
    auth = _auth_from_files(settings)
    if auth is None:
        auth = split_userinfo(config.prometheus_url)[1]  # legacy: user:password@ in prometheusUrl
    return PrometheusConnection(plan.url, auth, ca_file=settings.ca_file,
                                verify_tls=not settings.insecure_skip_tls_verify, credentials_owner=OPERATOR)


def _auth_from_files(settings: PrometheusConfig) -> PrometheusAuth | None:
    if settings.bearer_token_file:
        return PrometheusAuth(token=_read("prometheus.bearerTokenFile", settings.bearer_token_file))
    if settings.username_file and settings.password_file:
        return PrometheusAuth(_read("prometheus.usernameFile", settings.username_file),
                              _read("prometheus.passwordFile", settings.password_file))
    return None


def _read(key: str, path: str) -> str:
    where = f"operator configuration {key} {path}"
    try:
        value = Path(path).read_text().strip()
    except OSError as err:
        raise CredentialsError(f"{where}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"{where}: not UTF-8 text") from None
    if not value:
        raise CredentialsError(f"{where}: empty")
    return value
