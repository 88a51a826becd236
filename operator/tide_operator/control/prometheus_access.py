"""Which Prometheus a TideDeployment may be read from, and with whose credentials (pure).

The operator sends its queries (and, for the operator-configured URL, its own credentials) to
``spec.prometheus.url``, a field the tenant writes: without a check that is a confused deputy.
So a spec URL must lie under an entry of the operator configuration's ``prometheus.allowedUrls``
(empty: only ``prometheusUrl`` itself); operator-held credentials go only to ``prometheusUrl``;
a spec URL authenticates with the tenant's own Secret (``spec.prometheus.credentialsSecret``)
or not at all. docs/security.md has the threat model.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

from tide_operator.api.spec_workload import PrometheusSpec
from tide_operator.config import OperatorConfig

URL_FIELD = "spec.prometheus.url"
SECRET_FIELD = "spec.prometheus.credentialsSecret"  # noqa: S105  (a field path)
# Keys of spec.prometheus.credentialsSecret: those of kubernetes.io/basic-auth Secrets, a bearer
# token, and the CA that signed the server's certificate (as in kubernetes.io/tls Secrets).
USERNAME_KEY, PASSWORD_KEY, TOKEN_KEY, CA_KEY = "username", "password", "token", "ca.crt"
_DEFAULT_PORTS = {"http": 80, "https": 443}

Violation = tuple[str, str]  # (field path, message), like control.pod_policy's


class CredentialsError(ValueError):
    """Credentials that cannot be used as they are (the message names where they came from)."""


@dataclass(frozen=True)
class PrometheusAuth:
    """Basic or bearer-token auth; ``repr`` never shows the secret parts."""

    username: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
        return {}

    def secrets(self) -> tuple[str, ...]:
        """What must never appear in a message (the header values included)."""
        values = (self.password, self.token, *self.headers().values())
        return tuple(v for v in values if v)


@dataclass(frozen=True)
class PrometheusConnection:
    """Everything a query needs: where (never with userinfo), as whom, and which CA to trust."""

    url: str
    auth: PrometheusAuth = field(default_factory=PrometheusAuth)
    ca_file: str | None = None  # PEM bundle on disk (operator configuration)
    ca_pem: str | None = field(default=None, repr=False)  # PEM from the tenant's Secret
    verify_tls: bool = True
    credentials_owner: str = ""  # "operator", or "<namespace>/<secret>": adapters are never shared across owners


@dataclass(frozen=True)
class ConnectionPlan:
    """Whose credentials go to ``url``: the tenant's Secret, the operator's, or none."""

    url: str
    secret: str | None = None  # a Secret in the TideDeployment's namespace
    operator_credentials: bool = False


def split_userinfo(url: str) -> tuple[str, PrometheusAuth]:
    """``url`` without ``user:password@``, and that userinfo as basic auth (the legacy config form)."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, PrometheusAuth()
    host = parts.netloc.rsplit("@", 1)[1]
    auth = PrometheusAuth(unquote(parts.username), unquote(parts.password or ""))
    return parts._replace(netloc=host).geturl(), auth


def _origin(parts: SplitResult) -> tuple[str, str, int | None]:
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)


def _path_under(path: str, prefix: str) -> bool:
    path, prefix = path.rstrip("/"), prefix.rstrip("/")
    return prefix in ("", path) or path.startswith(prefix + "/")


def url_under(url: str, prefix: str) -> bool:
    """Same scheme, host and port, and a path at or below the prefix's (``http://p.evil`` is not under ``http://p``)."""
    try:
        candidate, allowed = urlsplit(url), urlsplit(split_userinfo(prefix)[0])
        return _origin(candidate) == _origin(allowed) and _path_under(candidate.path, allowed.path)
    except ValueError:  # a port that is not a number
        return False


def same_url(a: str, b: str) -> bool:
    """The same Prometheus: equal origins and paths, userinfo and trailing slashes aside."""
    return url_under(a, b) and url_under(b, a)


def _shape_violation(url: str) -> str | None:
    """What no Prometheus base URL may look like, allowlisted or not."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as err:
        return f"not a URL: {err}"
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return "must be http:// or https:// with a host"
    if any(segment in (".", "..") for segment in unquote(parts.path).split("/")):
        return "a path with . or .. segments"  # clients resolve them: the path would leave its prefix
    if parts.username is not None or parts.password is not None:
        return f"credentials do not go in the URL: put them in a Secret named by {SECRET_FIELD}"
    if parts.query or parts.fragment:
        return "a Prometheus base URL has no query or fragment"
    return None


def url_violation(url: str, config: OperatorConfig) -> str | None:
    """Why ``spec.prometheus.url`` is refused, or None when the operator may query it."""
    if why := _shape_violation(url):
        return why
    if same_url(url, config.prometheus_url):
        return None
    allowed = config.prometheus.allowed_urls
    if any(url_under(url, prefix) for prefix in allowed):
        return None
    shown = ", ".join(split_userinfo(prefix)[0] for prefix in allowed) or "none besides the default Prometheus"
    return f"{url} is not under a Prometheus URL the operator allows (prometheus.allowedUrls: {shown})"


def prometheus_violations(spec: PrometheusSpec, config: OperatorConfig) -> list[Violation]:
    """The spec's Prometheus fields the operator configuration refuses (empty: admitted)."""
    if spec.url is None:
        return []
    why = url_violation(spec.url, config)
    return [(URL_FIELD, why)] if why else []


def connection_plan(spec: PrometheusSpec, config: OperatorConfig) -> ConnectionPlan:
    """Where to send queries and with whose credentials (the spec's URL is checked first)."""
    operator_url, _ = split_userinfo(config.prometheus_url)
    if spec.url is None or same_url(spec.url, operator_url):
        return ConnectionPlan(operator_url, spec.credentials_secret, operator_credentials=not spec.credentials_secret)
    if why := url_violation(spec.url, config):  # reconcile refuses it first; never fetch it regardless
        raise CredentialsError(f"{URL_FIELD}: {why}")
    return ConnectionPlan(spec.url, spec.credentials_secret)


def auth_from_secret(data: Mapping[str, str], where: str) -> tuple[PrometheusAuth, str | None]:
    """Auth and CA from a credentials Secret's data; ``where`` names the Secret in errors."""
    token, username, password = (data.get(k) or None for k in (TOKEN_KEY, USERNAME_KEY, PASSWORD_KEY))
    if token and (username or password):
        raise CredentialsError(f"{where}: holds both {TOKEN_KEY!r} and {USERNAME_KEY!r}/{PASSWORD_KEY!r}; keep one")
    if (username is None) != (password is None):
        raise CredentialsError(f"{where}: {USERNAME_KEY!r} and {PASSWORD_KEY!r} go together")
    return PrometheusAuth(username, password, token.strip() if token else None), data.get(CA_KEY) or None
