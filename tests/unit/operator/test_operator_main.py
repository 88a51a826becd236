"""`python -m tide_operator`'s command line: the log format reaches Kopf's own logging setup."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import kopf
import pytest

from tide_operator.__main__ import configure_logging, parse_args


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def test_defaults_are_plain_logs_at_info() -> None:
    args = parse_args([])
    assert (args.log_format, args.verbose, args.namespace) == ("plain", False, [])


@pytest.mark.parametrize(("flag", "kopf_format"), [("plain", kopf.LogFormat.FULL), ("json", kopf.LogFormat.JSON)])
def test_log_format_is_handed_to_kopf(flag: str, kopf_format: kopf.LogFormat,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(kopf, "configure", lambda **kwargs: calls.append(kwargs))
    configure_logging(parse_args([f"--log-format={flag}", "--verbose"]))
    assert calls == [{"verbose": True, "log_format": kopf_format}]


def test_an_unknown_log_format_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--log-format", "xml"])
    assert exit_.value.code == 2
    assert "--log-format" in capsys.readouterr().err


@pytest.mark.usefixtures("root_logging")
def test_json_logs_are_one_json_object_per_line_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(parse_args(["--log-format", "json"]))
    logging.getLogger("tide_operator.test").warning("draft %s promoted", "v4")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines  # one handler: no second plain-text copy of each record
    record = json.loads(lines[0])
    assert (record["message"], record["severity"]) == ("draft v4 promoted", "warn")  # Kopf says warn


@pytest.mark.usefixtures("root_logging")
def test_plain_logs_carry_time_level_and_logger_once(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(parse_args([]))
    logging.getLogger("tide_operator.test").warning("draft v4 promoted")
    (line,) = capsys.readouterr().err.splitlines()
    assert "WARNING" in line
    assert "tide_operator.test" in line
    assert line.endswith("draft v4 promoted")


def test_leader_election_is_on_unless_switched_off_for_a_local_run() -> None:
    assert parse_args([]).leader_election is True
    assert parse_args(["--no-leader-election"]).leader_election is False


def test_leader_election_without_a_lease_namespace_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from tide_operator.__main__ import build_elector
    from tide_operator.config import LeaderElectionConfig

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit, match=r"POD_NAMESPACE.*--no-leader-election"):
        build_elector(LeaderElectionConfig())
