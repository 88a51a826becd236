"""The CLI's error paths: one line on stderr, a documented exit code, never a traceback."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tide_operator.cli.__main__ import main
from tide_operator.cli.errors import api_error


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on return: nothing listens there


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
              "clusters": [{"name": "k", "cluster": {"server": server}}],
              "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "llm"}}],
              "users": [{"name": "u", "user": {"token": "t"}}]}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_an_unreachable_api_server_is_exit_3_and_one_line(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    assert main(["get", "--kubeconfig", str(_kubeconfig(tmp_path, server))]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"tide: cannot reach the Kubernetes API server at {server}")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_no_configuration_is_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["status", "chat"]) == 3
    assert capsys.readouterr().err.startswith("tide: no Kubernetes configuration: ")


def test_usage_errors_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["pin", "chat"])  # no VERSION
    assert exited.value.code == 2
    assert "version" in capsys.readouterr().err


def _api(status: int, message: str = "") -> ApiException:
    err = ApiException(status=status, reason="Reason")
    err.body = json.dumps({"kind": "Status", "message": message})
    return err


@pytest.mark.parametrize(("status", "message", "expected"), [
    (404, "", "tide: TideDeployment llm/chat not found"),
    (403, 'tidedeployments.tide.dev "chat" is forbidden: User "dev" cannot patch',
     'tide: not allowed: tidedeployments.tide.dev "chat" is forbidden: User "dev" cannot patch'),
    (422, "spec.control.draftPin: Invalid value", "tide: the API server rejected the change: "
     "spec.control.draftPin: Invalid value"),
    (500, "etcdserver: request timed out", "tide: the API server answered 500: etcdserver: request timed out"),
])
def test_api_errors_read_as_one_line(status: int, message: str, expected: str) -> None:
    assert api_error(_api(status, message), "llm", "chat") == expected
