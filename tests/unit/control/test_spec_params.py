"""Every control knob of the typed spec reaches the policy's parameters, in the policy's units."""

from __future__ import annotations

from tide_operator.api import parse_spec
from tide_operator.control.cost_model import DEFAULT_PROFILE
from tide_operator.control.spec_params import policy_params
from tide_operator.control.speculation import SpeculationMode

BASE = {"target": {"model": "m/x", "revision": "r1"}, "storage": {"s3": {"bucket": "tide"}}}


def test_defaults_map_to_the_documented_policy_defaults():
    params = policy_params(parse_spec(BASE))
    assert params.target_revision == "r1"
    assert params.speculation is SpeculationMode.ADAPTIVE
    assert params.decision.min_dwell_s == 120
    assert params.decision.probe_interval_s == 600
    assert params.drift.long_half_life_s == 1800
    assert params.capture.max_buffer_bytes == 2 * 1024**3
    assert params.capture.retention_s == 86400
    assert params.training.backoff_s == 600
    assert params.canary.analysis_window_s == 300
    assert params.canary.min_promotion_interval_s == 600
    assert params.profile is DEFAULT_PROFILE


def test_every_knob_set_in_the_spec_arrives():
    spec = parse_spec({**BASE, "draft": {"numSpeculativeTokens": 5}, "control": {
        "speculation": "Off", "paused": True, "draftPin": "v7", "abortCanary": True,
        "adaptiveSpeculativeTokens": False,
        "decision": {"speedupMarginPercent": 9, "hysteresisPercent": 4, "minDwell": "30s", "probeInterval": "1h"},
        "drift": {"shortHalfLife": "1m", "longHalfLife": "10m", "thresholdPercent": 7, "minSamples": 50},
        "costProfile": {"points": [{"batchSize": 1, "draftCostPermille": 40, "verifyCostPercent": 105},
                                   {"batchSize": 64, "draftCostPermille": 80, "verifyCostPercent": 160}]},
        "capture": {"enabled": False, "samplingPercent": 25, "maxBufferSamples": 900, "maxBufferBytes": "1Mi",
                    "retention": "1h"},
        "training": {"sampleThreshold": 800, "backoff": "5m", "maxFailures": 2},
        "canary": {"replicas": 1, "analysisWindow": "2m", "minAcceptanceLengthGainPercent": 3,
                   "maxThroughputLossPercent": 6, "failureLimit": 1, "minPromotionInterval": "15m",
                   "consecutiveSuccessLimit": 0},
    }})
    params = policy_params(spec)
    assert (params.speculation, params.paused, params.draft_pin, params.abort_canary) == (
        SpeculationMode.OFF, True, "v7", True)
    assert params.num_speculative_tokens == 5
    assert params.adaptive_speculative_tokens is False
    assert (params.decision.speedup_margin_percent, params.decision.hysteresis_percent,
            params.decision.min_dwell_s, params.decision.probe_interval_s) == (9, 4, 30, 3600)
    assert (params.drift.short_half_life_s, params.drift.long_half_life_s, params.drift.threshold_percent,
            params.drift.min_samples) == (60, 600, 7, 50)
    assert (params.capture.enabled, params.capture.sampling_percent, params.capture.max_buffer_samples,
            params.capture.max_buffer_bytes, params.capture.retention_s) == (False, 25, 900, 1024**2, 3600)
    assert (params.training.sample_threshold, params.training.backoff_s, params.training.max_failures) == (
        800, 300, 2)
    assert (params.canary.analysis_window_s, params.canary.min_acceptance_length_gain_percent,
            params.canary.max_throughput_loss_percent, params.canary.failure_limit,
            params.canary.min_promotion_interval_s, params.canary.consecutive_success_limit) == (120, 3, 6, 1, 900, 0)
    assert params.profile is not DEFAULT_PROFILE
    assert params.profile.draft_cost(1) < params.profile.draft_cost(64)
