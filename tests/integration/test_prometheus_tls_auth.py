"""The adapter against Debian's Prometheus serving TLS and basic auth (``--web.config.file``).

One Prometheus for the module, on loopback, with a certificate from a CA made here; bearer auth
(which Prometheus 2.42 itself cannot check) through a loopback proxy that checks the header and
forwards to it. Proves: queries go out with CA verification and auth; a wrong CA, a wrong password
or a wrong token fails with a clear message that carries no credential; redirects are not followed.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client
import http.server
import ipaddress
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tide_localcluster.prometheus import PrometheusServer, start_prometheus
from tide_operator.adapters.prometheus_adapter import (
    AdapterConfig,
    PrometheusAdapter,
    PrometheusUnavailable,
    http_query,
)
from tide_operator.adapters.prometheus_credentials import resolve_connection
from tide_operator.api.spec_workload import PrometheusSpec
from tide_operator.config import load_operator_config
from tide_operator.control.prometheus_access import PrometheusAuth, PrometheusConnection

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

USER, PASSWORD = "tide", "pw-Zq8-only-in-the-web-config"
TOKEN = "tok-3f9c-never-in-a-message"


@dataclass(frozen=True)
class Pki:
    ca: Path
    other_ca: Path  # signed nothing this server presents
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _ca(directory: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key, cert, path


def make_pki(directory: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 signed by it, and an unrelated CA."""
    ca_key, ca_cert, ca_path = _ca(directory, "tide-test-ca")
    _, _, other_path = _ca(directory, "other-ca")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("prometheus")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    cert_path, key_path = directory / "prometheus.crt", directory / "prometheus.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Pki(ca_path, other_path, cert_path, key_path)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Pki]]:
    workdir = tmp_path_factory.mktemp("prometheus-tls")
    pki = make_pki(workdir)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()  # cost 4: fast checks
    web_config = workdir / "web.yml"
    web_config.write_text(yaml.safe_dump({
        "tls_server_config": {"cert_file": str(pki.cert), "key_file": str(pki.key)},
        "basic_auth_users": {USER: hashed}}))
    server = start_prometheus(workdir, workdir / "targets.json", web_config=web_config, ca_file=pki.ca)
    try:
        yield server, pki
    finally:
        server.stop()


def _connection(url: str, ca: Path | None, auth: PrometheusAuth) -> PrometheusConnection:
    return PrometheusConnection(url, auth, ca_file=str(ca) if ca else None)


def _one(connection: PrometheusConnection) -> float:
    """The value of `vector(1)` as the adapter's client answers it."""
    (sample,) = http_query(connection, timeout_s=5)("vector(1)", time.time())
    return float(sample["value"][1])


def _failure(connection: PrometheusConnection) -> str:
    with pytest.raises(PrometheusUnavailable) as err:
        PrometheusAdapter(connection, AdapterConfig(interval_s=0, timeout_s=3)).snapshot()
    message = str(err.value)
    for secret in (PASSWORD, TOKEN, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()):
        assert secret not in message
    return message


def test_basic_auth_over_verified_tls(secured: tuple[PrometheusServer, Pki]) -> None:
    server, pki = secured
    assert server.url.startswith("https://127.0.0.1:")
    connection = _connection(server.url, pki.ca, PrometheusAuth(USER, PASSWORD))
    assert _one(connection) == 1.0
    snapshot = PrometheusAdapter(connection, AdapterConfig(interval_s=0)).snapshot()  # every metric's query
    assert snapshot.deployments == {}  # no vLLM pods scraped here: answered, with no series


def test_a_tenant_secret_carries_the_ca_and_the_password(secured: tuple[PrometheusServer, Pki]) -> None:
    server, pki = secured
    config = load_operator_config({"prometheus": {"allowedUrls": [server.url]}})
    spec = PrometheusSpec.model_validate({"url": server.url, "credentialsSecret": "prom-auth"})
    data = {"username": USER, "password": PASSWORD, "ca.crt": pki.ca.read_text()}
    connection = resolve_connection("team-a", spec, config, lambda namespace, name: data)
    assert connection.ca_pem is not None
    assert connection.ca_file is None
    assert _one(connection) == 1.0


def test_a_wrong_ca_or_no_ca_fails_certificate_verification(secured: tuple[PrometheusServer, Pki]) -> None:
    server, pki = secured
    for ca in (pki.other_ca, None):  # None: the system's CAs, which do not know the test CA
        message = _failure(_connection(server.url, ca, PrometheusAuth(USER, PASSWORD)))
        assert message.startswith(f"prometheus {server.url}: TLS certificate not trusted (prometheus.caFile")
        assert "CERTIFICATE_VERIFY_FAILED" in message
        assert len(message) <= 768


def test_a_wrong_password_is_refused_without_the_password_in_the_message(
    secured: tuple[PrometheusServer, Pki],
) -> None:
    server, pki = secured
    message = _failure(_connection(server.url, pki.ca, PrometheusAuth(USER, "wrong-" + PASSWORD)))
    assert message.startswith(f"prometheus {server.url}: credentials refused: HTTP Status Code 401")
    assert "wrong-" not in message
    # The legacy operator configuration (userinfo in prometheusUrl) is sent as basic auth, never shown.
    config = load_operator_config({"prometheusUrl": server.url.replace("//", f"//{USER}:wrong-{PASSWORD}@"),
                                   "prometheus": {"caFile": str(pki.ca)}})
    legacy = resolve_connection("team-a", PrometheusSpec(), config, lambda namespace, name: {})
    assert legacy.url == server.url
    assert "wrong-" not in _failure(legacy)


class BearerProxy(http.server.ThreadingHTTPServer):
    """Checks ``Authorization: Bearer <token>``, then forwards GETs to Prometheus with basic auth."""

    def __init__(self, upstream: str, ca: Path) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream
        self.context = ssl.create_default_context(cafile=str(ca))
        self.upstream_auth = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: BearerProxy

    def do_GET(self) -> None:
        if self.path.startswith("/moved/"):  # a redirect to Prometheus itself: must not be followed
            self._reply(302, b"", {"Location": self.server.upstream + self.path.removeprefix("/moved")})
        elif self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._reply(401, b"bearer token required\n", {})
        else:
            request = urllib.request.Request(self.server.upstream + self.path,
                                             headers={"Authorization": self.server.upstream_auth})
            with urllib.request.urlopen(request, context=self.server.context, timeout=5) as answer:
                self._reply(answer.status, answer.read(), {"Content-Type": answer.headers["Content-Type"]})

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def bearer_proxy(secured: tuple[PrometheusServer, Pki]) -> Iterator[BearerProxy]:
    server, pki = secured
    proxy = BearerProxy(server.url, pki.ca)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_bearer_token_auth_through_a_checking_proxy(bearer_proxy: BearerProxy) -> None:
    assert _one(_connection(bearer_proxy.url, None, PrometheusAuth(token=TOKEN))) == 1.0
    message = _failure(_connection(bearer_proxy.url, None, PrometheusAuth(token=TOKEN + "-stale")))
    assert "HTTP Status Code 401" in message
    assert "-stale" not in message
    assert "HTTP Status Code 401" in _failure(_connection(bearer_proxy.url, None, PrometheusAuth()))


def test_a_redirect_is_not_followed(bearer_proxy: BearerProxy) -> None:
    message = _failure(_connection(bearer_proxy.url + "/moved", None, PrometheusAuth(token=TOKEN)))
    assert "redirect" in message.lower()
    probe = http.client.HTTPConnection("127.0.0.1", bearer_proxy.server_address[1], timeout=5)
    probe.request("GET", "/moved/api/v1/query?query=up")
    assert probe.getresponse().status == 302  # the proxy did redirect: the client refused to follow
    probe.close()
