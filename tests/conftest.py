"""Shared fixtures: one real control plane per test run, a namespace per test, logs on failure.

The plane (etcd, kube-apiserver, controller-manager, scheduler, fake GPU nodes, the process
kubelet and Prometheus) starts on first use and is always torn down at the end of the session.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PLANE_TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tide_localcluster import binaries
    from tide_localcluster import plane as local_plane
    from tide_localcluster.paths import DEFAULT_IMAGES, DEFAULT_POOLS

    binaries.ensure_built()
    state_dir = tmp_path_factory.mktemp("localcluster")
    started = time.monotonic()
    try:
        info = local_plane.up(state_dir, DEFAULT_POOLS, DEFAULT_IMAGES)
        PLANE_TIMINGS["up_s"] = time.monotonic() - started
        yield info
    finally:
        local_plane.down(state_dir)


@pytest.fixture(scope="session")
def kube(plane: object) -> object:
    from tide_localcluster.client import api_client

    return api_client(plane)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: object) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards whatever happened."""
    from kubernetes import client

    core = client.CoreV1Api(kube)
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name}})
    deadline = time.monotonic() + 30
    # Pods are refused until the default service account has its token (v1.20 token controller).
    while not any(sa.secrets for sa in core.list_namespaced_service_account(name).items):
        if time.monotonic() > deadline:
            raise TimeoutError(f"service account `default` never got a token in {name}")
        time.sleep(0.2)
    request.node.tide_namespace = name
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    """On failure, attach the control plane's and the test's pods' logs to the report."""
    report = yield
    if report.failed and "plane" in getattr(item, "fixturenames", ()):
        info = item.funcargs.get("plane") if hasattr(item, "funcargs") else None
        if info is not None:
            for title, text in _logs(Path(info.state_dir), getattr(item, "tide_namespace", None)):
                report.sections.append((title, text))
    return report


def _logs(state_dir: Path, namespace: str | None) -> list[tuple[str, str]]:
    from tide_localcluster.plane import tail

    sections = [(f"log {p.stem}", tail(p, 40)) for p in sorted((state_dir / "logs").glob("*.log"))]
    if namespace:
        for p in sorted((state_dir / "pods" / namespace).glob("*/*.log")):
            sections.append((f"pod log {p.parent.name}/{p.stem}", tail(p, 60)))
    return sections


def pytest_sessionfinish(session: pytest.Session) -> None:
    """An xdist worker hands its plane's start-up time and fault rows to the controller, which prints them."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["tide_plane_up_s"] = PLANE_TIMINGS.get("up_s")
        output["tide_fault_rows"] = [(r.fault, r.survived, r.nothing_lost)
                                     for r in session.config.stash.get(FAULT_ROWS, [])]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    if output.get("tide_plane_up_s") is not None:
        PLANE_TIMINGS["up_s"] = max(PLANE_TIMINGS.get("up_s", 0.0), output["tide_plane_up_s"])
    if output.get("tide_fault_rows"):
        from tide_localcluster.faults import FaultRow

        config = node.config  # type: ignore[attr-defined]
        config.stash.setdefault(FAULT_ROWS, []).extend(FaultRow(*row) for row in output["tide_fault_rows"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if "up_s" in PLANE_TIMINGS:
        terminalreporter.write_line(f"local control plane came up in {PLANE_TIMINGS['up_s']:.1f}s (binaries cached)")
    rows = terminalreporter.config.stash.get(FAULT_ROWS, [])
    if rows:
        from tide_localcluster.faults import fault_table

        terminalreporter.section("faults of a real cluster")
        for line in fault_table(rows):
            terminalreporter.write_line(line)


FAULT_ROWS = pytest.StashKey[list]()


@pytest.fixture(scope="session")
def fault_report(pytestconfig: pytest.Config) -> list:
    """Rows (tide_localcluster.faults.FaultRow) the fault tests add; the summary prints them as a table."""
    return pytestconfig.stash.setdefault(FAULT_ROWS, [])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 protocol server on loopback (moto's server mode); boto3 talks to it over HTTP."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> object:
    """A boto3 client on the loopback S3 server, with the environment boto3 users in the test read."""
    import boto3

    for key, value in {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test",
                       "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", endpoint_url=s3_endpoint)
