"""Issue 15 item 7: the operator's speculate-or-not decision against the faster mode measured live.

One vLLM CPU server (tiny bigram target). A sweep with the good draft calibrates the cost profile
(what `tide calibrate` writes); then separate, held-out sweeps, once with the good draft and once
after a hot swap to a random one, measure throughput with speculation off and on at each load. At
each load, decide_speculation (Adaptive, no margin, hysteresis or dwell, from either starting
state) fed the calibrated profile and the acceptance measured there must choose the mode measured
faster. On two CPU cores the tiny target has no break-even in batch size (the good draft wins at
every concurrency, the random one loses at every one), so the test covers both sides of the model's
break-even through acceptance. Each draft is swept twice: a load is judged only where both sweeps
put the faster mode beyond NOISE on the same side (elsewhere either choice is right, or the shared
cores decided the measurement), and where the calibrated model itself sits within NOISE of break-even
(there the decision is a toss-up by design: one noisy calibration sweep gave c=0 and beta=1 at 16
requests, so a draft that accepts nothing modelled exactly 1.0 and the switch held either state; the
model's error is what bench/calibration_bench.py reports). The profile is calibrated on the fastest
of CALIBRATION_SWEEPS sweeps at each load and mode (a disturbance on shared cores only slows a point
down; one disturbed sweep once calibrated 1.45x at 16 requests while both held-out sweeps measured
0.64x and 0.71x, and the affine fit over the off points carries such an error to every load), and a
good-draft load is judged only where that calibration measured the same side as the held-out sweeps.
Each draft must leave at least one judged load.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_vllm_helpers import TOKEN

from tide_contracts import serving_control as sc

pytestmark = pytest.mark.vllm

CONCURRENCIES = (1, 4, 16)
NOISE = 0.15  # issue 15's tolerance; on two shared cores the same point measured twice differs by ~20% (bench)
CALIBRATION_SWEEPS = 3
PROMPTS = tuple(f"w{10 + i} w{40 + i} w{70 + i}" for i in range(16))


@pytest.fixture(scope="module")
def server(tiny_models, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tide_serving.testing.server import ServerConfig, start_server

    tmp = tmp_path_factory.mktemp("adaptive")
    env = {sc.CONTROL_TOKEN_ENV: TOKEN, "TIDE_STATE_DIR": str(tmp / "state"),
           "TIDE_TARGET_REVISION": "tiny-bigram-1", "TIDE_LOCAL_DRAFTS_DIR": str(tmp_path_factory.getbasetemp())}
    srv = start_server(ServerConfig(target=tiny_models.target, draft=tiny_models.good_draft,
                                    log_path=tmp / "server.log", env=env))
    try:
        yield srv
    finally:
        srv.stop()


def _decides(sweep, b: int, profile, start_enabled: bool) -> bool:
    from tide_operator.control.speculation import (
        DecisionParams,
        SpeculationInput,
        SpeculationMode,
        SpeculationState,
        decide_speculation,
    )

    observed = SpeculationInput(acceptance_rate=sweep.acceptance_rate(b), batch_size=float(b),
                                max_speculative_tokens=sweep.speculative_tokens, adaptive_tokens=False)
    params = DecisionParams(speedup_margin_percent=0.0, hysteresis_percent=0.0, min_dwell_s=0.0)
    decision = decide_speculation(observed, SpeculationState(enabled=start_enabled), SpeculationMode.ADAPTIVE,
                                  params, now=1000.0, profile=profile)
    return decision.state.enabled


def _fastest(sweeps):
    """One sweep of the fastest point at each load and mode: noise on shared cores only adds time."""
    from tide_operator.control.calibration import Sweep

    best = {}
    for sweep in sweeps:
        for p in sweep.points:
            key = (p.concurrency, p.speculation)
            if key not in best or p.throughput > best[key].throughput:
                best[key] = p
    return Sweep(points=tuple(best.values()), speculative_tokens=sweeps[0].speculative_tokens)


def test_the_decision_picks_the_faster_mode_measured(server, tiny_models, tmp_path: Path) -> None:
    from tide_operator.adapters.calibration_sweep import SweepSettings, run_sweep
    from tide_operator.control.calibration import cost_points, profile_from_spec_points, spec_points
    from tide_operator.control.cost_model import practical_speedup
    from tide_serving.testing.tiny_models import publish_draft

    client = sc.ServingControlClient(server.control_url, TOKEN, timeout_s=120)
    settings = SweepSettings(concurrencies=CONCURRENCIES, output_tokens=64, rounds=4, prompts=PROMPTS)
    calibration = _fastest([run_sweep(server.base_url, client, settings) for _ in range(CALIBRATION_SWEEPS)])
    profile = profile_from_spec_points(spec_points(cost_points(calibration)))
    held_out = {"good": [run_sweep(server.base_url, client, settings) for _ in range(2)]}
    random_dir = publish_draft(tiny_models.random_draft, tmp_path / "v1", version="v1")
    assert client.load_draft(sc.DraftLoadRequest(source=str(random_dir), version="v1")).draft.version == "v1"
    held_out["random"] = [run_sweep(server.base_url, client, settings) for _ in range(2)]

    report = []
    for draft, (sweep, again) in held_out.items():
        judged = 0
        for b in CONCURRENCIES:
            measured = (sweep.measured_speedup(b), again.measured_speedup(b))
            chosen = {_decides(sweep, b, profile, start) for start in (False, True)}
            report.append(f"{draft} b={b} measured={measured[0]:.3f},{measured[1]:.3f} decided on={chosen}")
            modelled = practical_speedup(sweep.acceptance_rate(b), sweep.speculative_tokens, b, profile)
            report[-1] += f" modelled={modelled:.3f}"
            faster = {m > 1.0 for m in measured if abs(m - 1.0) > NOISE}
            if len(faster) != 1 or any(abs(m - 1.0) <= NOISE for m in (*measured, modelled)):
                continue  # within the noise, the two sweeps disagree, or the model is at break-even
            if draft == "good" and (calibration.measured_speedup(b) > 1.0) not in faster:
                report[-1] += f" (calibrated on {calibration.measured_speedup(b):.3f}: not judged)"
                continue  # the calibration and the held-out sweeps disagree: one side was disturbed
            judged += 1
            assert chosen == faster, "\n".join(report)
        assert judged >= 1, f"{draft}: every load within {NOISE:.0%} of break-even\n" + "\n".join(report)
    print("\n".join(report))  # the figures, with -s
