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
    assert params.measurements == 5
    analysis, better = CanaryAnalysis(started_at=0.0), PodGroupMetrics(2.5, None)
    phase, now = AnalysisPhase.RUNNING, 0
    while phase is AnalysisPhase.RUNNING and now < 60:  # a control pass every 5 s
        now += 5
        if analysis.due(params, now):
            control = PodGroupMetrics(1.4, None)
            analysis = record(analysis, measure(better, control, params, analysis), better, now, control)
        phase = analysis_phase(analysis, params, now)
    # The first measurement only seeds the noise estimate; three successful in a row end it early.
    assert phase is AnalysisPhase.SUCCESSFUL
    assert (analysis.inconclusive, analysis.successful) == (1, 3)


def test_an_outage_extends_the_analysis_instead_of_ending_it_on_too_little_evidence():
    """Passes the operator could not run take no measurement: the window is a count, not a deadline."""
    params = _params("30s")
    control, better = PodGroupMetrics(1.4, None), PodGroupMetrics(2.5, None)
    analysis = record(CanaryAnalysis(started_at=0.0), measure(better, control, params), better, 6.0, control)
    # The apiserver was away from 7 s to 90 s: well past the 30 s window, one measurement taken.
    assert analysis_phase(analysis, params, 90.0) is AnalysisPhase.RUNNING
    for now in (90.0, 96.0, 102.0):
        analysis = record(analysis, measure(better, control, params, analysis), better, now, control)
    assert analysis_phase(analysis, params, 102.0) is AnalysisPhase.SUCCESSFUL
