"""A short canary analysisWindow still gets measurements: the interval shrinks with the window."""

from __future__ import annotations

from tide_operator.api import parse_spec
from tide_operator.control.canary import AnalysisPhase, CanaryAnalysis, PodGroupMetrics, analysis_phase, measure, record
from tide_operator.control.spec_params import policy_params

BASE = {"target": {"model": "m/x", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}}


def _params(window: str):
    return policy_params(parse_spec({**BASE, "control": {"canary": {"analysisWindow": window}}})).canary


def test_default_window_measures_once_a_minute():
    assert _params("5m").measurement_interval_s == 60
    assert _params("1h").measurement_interval_s == 60


def test_a_window_under_a_minute_can_succeed():
    params = _params("30s")
    assert params.measurement_interval_s == 6
    analysis, better = CanaryAnalysis(started_at=0.0), PodGroupMetrics(2.5, None)
    for now in range(5, 31, 5):  # a control pass every 5 s
        if analysis.due(params, now):
            control = PodGroupMetrics(1.4, None)
            analysis = record(analysis, measure(better, control, params, analysis), better, now, control)
    # Three measurements: the first only seeds the noise estimate, the next two are successful.
    assert analysis.successful >= 2
    assert analysis_phase(analysis, params, 30.0) is AnalysisPhase.SUCCESSFUL
