from __future__ import annotations

import argparse
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from cli_fakes import EVENTS, NOW_S, START_S, fake_prometheus, tide_deployment, wave

from tide_operator.cli.__main__ import duration_s, parser
from tide_operator.cli.status import age, render_status
from tide_operator.cli.timeline import (
    PROMOTION,
    ROLLBACK,
    Queries,
    Series,
    build_timeline,
    markers_from_events,
    parse_matrix,
)

NOW = datetime.fromtimestamp(NOW_S, UTC)


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2025-12-02T12:59:15Z", "45s"), ("2025-12-02T12:58:00Z", "2m"), ("2025-12-02T12:00:00Z", "60m"),
    ("2025-12-02T10:00:00Z", "3h"), ("2025-11-29T13:00:00Z", "3d"), (None, "-"),
])
def test_age_reads_like_kubectl(stamp: str | None, expected: str) -> None:
    assert age(stamp, NOW) == expected


def test_status_shows_phase_conditions_pools_draft_speculation_and_decision() -> None:
    text = render_status(tide_deployment(), EVENTS[-2:], now=NOW)
    lines = text.splitlines()
    assert lines[0] == "TideDeployment llm/chat: phase Training, generation 4 (observed 4)"
    ready = next(line for line in lines if line.strip().startswith("Ready"))
    assert ready.split()[:4] == ["Ready", "True", "ReplicasReady", "3h"]
    assert "Inference pool:  H100, 2/2 replicas ready, 2 nodes fit" in lines
    assert "Training pool:   MI250, 1 node fit" in lines
    assert "Draft:           current v3 (target revision 0e9e39f), candidate r7" in lines
    assert ("Speculation:     on, 3 speculative tokens, acceptance length 2.34 tokens/step, "
            "modelled speedup 1.35x") in lines
    assert "Last decision:   LaunchTraining (BufferFilled), 5m ago: 2048 new samples" in lines
    assert any("CanaryAborted" in line and "RollBack: r6" in line for line in lines)


def test_status_names_the_canary_pods_only_during_a_canary() -> None:
    during = tide_deployment()
    during["status"]["canary"] = {"candidate": "3fa9c2d1-r7", "pods": ["chat-vllm-a", "chat-vllm-b"]}
    assert "Canary:          3fa9c2d1-r7 on chat-vllm-a, chat-vllm-b" in render_status(during, now=NOW).splitlines()
    assert "Canary:" not in render_status(tide_deployment(), now=NOW)


def test_status_lists_serving_groups_and_what_retires() -> None:
    grouped = tide_deployment()
    grouped["status"]["servingGroups"] = [
        {"gpuClass": "H100", "deployment": "chat-vllm-h100", "replicas": 2, "replicasReady": 2},
        {"gpuClass": "MI250", "deployment": "chat-vllm-mi250", "replicas": 3, "replicasReady": 1},
        {"gpuClass": "A100", "deployment": "chat-vllm-a100", "replicas": 1, "replicasReady": 1, "retiring": True}]
    assert ("Serving groups:  H100 2/2, MI250 1/3, A100 1/1 (retiring)"
            in render_status(grouped, now=NOW).splitlines())
    assert "Serving groups:" not in render_status(tide_deployment(), now=NOW)


def test_status_of_a_fresh_object_says_what_is_missing() -> None:
    fresh = {"metadata": {"name": "chat", "namespace": "llm", "generation": 2}, "status": {}}
    text = render_status(fresh, now=NOW)
    assert "generation 2 (observed 0)" in text
    assert "not yet acted on the latest spec change" in text
    assert "none yet (is the operator running?)" in text
    assert "Speculation:     no decision yet" in text


def test_promotions_and_rollbacks_come_from_event_messages() -> None:
    markers = markers_from_events(EVENTS)
    assert [(m.kind, m.text) for m in markers] == [(PROMOTION, "v3 beat v2 by 6% acceptance length"),
                                                   (ROLLBACK, "r6 lost 8% throughput")]
    assert markers[0].time == datetime(2025, 12, 2, 12, 20, tzinfo=UTC).timestamp()


def test_parse_matrix_drops_nan_samples_and_empty_series() -> None:
    data = {"resultType": "matrix", "result": [
        {"metric": {"version": "v3"}, "values": [[1.0, "2.5"], [2.0, "NaN"], [3.0, "2.25"]]},
        {"metric": {}, "values": [[1.0, "NaN"]]},
    ]}
    assert parse_matrix(data) == [Series("v3", ((1.0, 2.5), (3.0, 2.25)))]


def test_timeline_falls_back_to_one_line_without_draft_info() -> None:
    asked: list[str] = []

    def prometheus(expr: str) -> list[Series]:
        asked.append(expr)
        return [Series("", ((START_S, 2.0),))] if "vllm:spec_decode" in expr and "version" not in expr else []

    timeline = build_timeline(Queries("llm", "chat", "1m"), prometheus, [], START_S, NOW_S)
    assert [s.label for s in timeline.acceptance_length] == ["all pods"]
    assert "by (version)" in asked[0]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_plot_queries_are_valid_promql(tmp_path: Path) -> None:
    queries = Queries("llm", "chat", "1m")
    exprs = [queries.acceptance_length(True), queries.acceptance_length(False), queries.speculation(),
             queries.batch_size()]
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": [
        {"record": f"q:{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    run = subprocess.run(["promtool", "check", "rules", str(path)], check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_plot_writes_a_png_with_every_panel(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from tide_operator.cli.plot import plot_timeline

    timeline = build_timeline(Queries("llm", "chat", "1m"), fake_prometheus, EVENTS, START_S, NOW_S)
    assert len(timeline.markers) == 2
    out = plot_timeline(timeline, tmp_path / "plots" / "chat.png")
    with Image.open(out) as image:
        assert image.format == "PNG"
        assert image.size[0] >= 1000
        assert image.size[1] >= 700
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is not None
    assert len(colours) > 50  # lines, fills and text, not a blank canvas


def test_durations_and_arguments() -> None:
    assert [duration_s(t) for t in ("90s", "15m", "6h", "2d")] == [90, 900, 21600, 172800]
    with pytest.raises(argparse.ArgumentTypeError, match="'1 hour'"):
        duration_s("1 hour")
    args = parser().parse_args(["-n", "llm", "plot", "chat", "--prometheus", "http://p:9090", "--since", "30m"])
    assert (args.namespace, args.name, args.since, args.out) == ("llm", "chat", 1800, Path("tide.png"))
    history = parser().parse_args(["history", "chat", "--credentials-from-secret"])
    assert history.credentials_from_secret is True
    assert history.namespace is None


def test_namespace_may_follow_the_command_like_kubectl() -> None:
    args = parser().parse_args(["status", "chat", "-n", "llm", "--kubeconfig", "/k"])
    assert (args.namespace, args.kubeconfig, args.context) == ("llm", "/k", None)
    assert parser().parse_args(["-n", "llm", "status", "chat"]).namespace == "llm"


def test_unreachable_prometheus_is_a_clear_error() -> None:
    import socket

    from tide_operator.cli.timeline import prometheus_query_range

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    query = prometheus_query_range(f"http://127.0.0.1:{port}", START_S, NOW_S, 30, timeout_s=2)
    with pytest.raises(RuntimeError, match=f"Prometheus at http://127.0.0.1:{port} did not answer"):
        query("up")


def test_speculation_off_spans_are_shaded_until_it_comes_back() -> None:
    from tide_operator.cli.plot import _off_spans
    from tide_operator.cli.timeline import Timeline

    on_off = Series("", ((0.0, 1.0), (10.0, 0.0), (20.0, 0.0), (30.0, 1.0), (40.0, 0.0)))
    timeline = Timeline("t", 0.0, 50.0, (), (on_off,), (), ())
    assert _off_spans(timeline) == [(10.0, 20.0), (20.0, 30.0), (40.0, 50.0)]


def test_the_time_axis_starts_at_the_first_data_point() -> None:
    """A deployment younger than --since: the plot starts where its data does, not two-thirds empty."""
    late = START_S + 2400

    def prometheus(expr: str) -> list[Series]:
        return [Series("", tuple(p for p in wave(2.0, 0.1) if p[0] >= late))]

    timeline = build_timeline(Queries("llm", "chat", "1m"), prometheus, [], START_S, NOW_S)
    assert timeline.start == late
    assert build_timeline(Queries("llm", "chat", "1m"), fake_prometheus, [], START_S, NOW_S).start == START_S
    assert build_timeline(Queries("llm", "chat", "1m"), lambda expr: [], [], START_S, NOW_S).start == START_S
