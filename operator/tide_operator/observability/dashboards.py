"""The TIDE Grafana dashboard, generated from code and committed as JSON in the chart.

``python -m tide_operator.observability.dashboards`` rewrites charts/tide-operator/files/dashboards/
(a unit test fails when the committed JSON drifts). Label names follow the alert rules: vLLM and
serving-plugin series carry ``namespace`` and ``label_tide_dev_deployment``; the operator's own
series ``tide_namespace`` and ``tide_deployment`` (tide_operator.metrics).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tide_operator.observability.grafana import (
    Panel,
    Row,
    Target,
    annotation,
    dashboard,
    datasource_variable,
    query_variable,
)

VLLM = 'namespace="$namespace", label_tide_dev_deployment=~"$deployment"'
OPERATOR = 'tide_namespace="$namespace", tide_deployment=~"$deployment"'
BY = "label_tide_dev_deployment"
# Every vLLM series joined to the draft its pod serves (the plugin's tide_draft_info, one per pod).
WITH_VERSION = "* on (namespace, pod) group_left (version) tide_draft_info"
RATE = "$__rate_interval"
# One series per serving pod on every scrape, draft or not (tide_draft_info exists only while a draft
# is loaded): the variables list deployments that bootstrap or failed to load a draft too.
PER_POD = "tide_serving_plugin_info"


def _rate(metric: str, by: str, selector: str = VLLM, join: bool = False) -> str:
    inner = f"rate({metric}{{{selector}}}[{RATE}])"
    if join:
        inner = f"({inner} {WITH_VERSION})"
    return f"sum by ({by}) ({inner})"


def _acceptance_length(by: str, join: bool) -> str:
    accepted = _rate("vllm:spec_decode_num_accepted_tokens_total", by, join=join)
    drafts = _rate("vllm:spec_decode_num_drafts_total", by, join=join)
    return f"1 + {accepted} / {drafts}"


def speculation_row() -> Row:
    per_version = f"{BY}, version"
    return Row("Speculation", (
        Panel("Mean acceptance length by draft version", (
            Target(_acceptance_length(per_version, join=True), "{{label_tide_dev_deployment}} draft {{version}}"),),
            unit="none", width=12,
            description="Tokens emitted per verify step (1 + accepted / drafts). Near 1: the draft is dead weight."),
        Panel("Acceptance rate by draft version", (
            Target(f'{_rate("vllm:spec_decode_num_accepted_tokens_total", per_version, join=True)} / '
                   f'{_rate("vllm:spec_decode_num_draft_tokens_total", per_version, join=True)}',
                   "{{label_tide_dev_deployment}} draft {{version}}"),),
            unit="percentunit", width=12, field_config={"min": 0, "max": 1}),
        Panel("Acceptance by draft position", (
            Target(f'{_rate("vllm:spec_decode_num_accepted_tokens_per_pos_total", f"{BY}, position")} '
                   f'/ ignoring (position) group_left {_rate("vllm:spec_decode_num_drafts_total", BY)}',
                   "{{label_tide_dev_deployment}} position {{position}}"),),
            unit="percentunit", width=8, field_config={"min": 0, "max": 1},
            description="Fraction of verify steps whose k-th draft token was accepted."),
        Panel("Speculation on/off", (
            Target(f"max by ({BY}) (tide_speculation_enabled{{{VLLM}}})", "{{label_tide_dev_deployment}} pods"),
            Target(f"max by (tide_deployment) (tide_operator_speculation_enabled{{{OPERATOR}}})",
                   "{{tide_deployment}} operator"),),
            width=8, field_config={"min": 0, "max": 1, "custom": {"lineInterpolation": "stepAfter"}}),
        Panel("Modelled speedup (operator)", (
            Target(f"max by (tide_deployment) (tide_operator_modelled_speedup_ratio{{{OPERATOR}}})",
                   "{{tide_deployment}} modelled"),),
            unit="none", width=8,
            description="The cost model's speedup at the observed batch size; speculation stays on above 1 + margin."),
        Panel("Generation throughput (measured)", (
            Target(_rate("vllm:generation_tokens_total", BY), "{{label_tide_dev_deployment}}"),),
            unit="tokens/s", width=12,
            description="Measured output tokens per second: compare across a speculation switch."),
        Panel("Batch size (running requests per engine)", (
            Target(f"sum by ({BY}) (vllm:num_requests_running{{{VLLM}}}) "
                   f"/ count by ({BY}) (vllm:num_requests_running{{{VLLM}}})", "{{label_tide_dev_deployment}}"),),
            unit="none", width=12),
    ))


def lifecycle_row() -> Row:
    return Row("Capture, training and drafts", (
        Panel("Capture rate", (
            Target(_rate("tide_capture_tokens_total", BY), "{{label_tide_dev_deployment}} tokens/s"),
            Target(_rate("tide_capture_dropped_samples_total", BY), "{{label_tide_dev_deployment}} dropped samples/s"),
            Target(_rate("tide_capture_write_errors_total", BY), "{{label_tide_dev_deployment}} write errors/s"),),
            unit="short", width=8),
        Panel("Capture buffer fill (captured bytes in window)", (
            Target(f"sum by ({BY}) (increase(tide_capture_bytes_total{{{VLLM}}}[$__range]))",
                   "{{label_tide_dev_deployment}}"),),
            kind="stat", unit="bytes", width=8),
        Panel("Phase", (
            Target(f"max by (tide_deployment, phase) (tide_operator_phase{{{OPERATOR}}}) == 1",
                   "{{tide_deployment}} {{phase}}"),),
            kind="state-timeline", width=8, options={"mergeValues": True, "showValue": "never"}),
        Panel("Training runs", (
            Target(f"sum by (tide_deployment, outcome) (increase(tide_operator_training_jobs_total{{{OPERATOR}}}[1h]))",
                   "{{tide_deployment}} {{outcome}}"),),
            kind="barchart", unit="short", width=8),
        Panel("Decisions", (
            Target(f"sum by (action, reason) (increase(tide_operator_decisions_total{{{OPERATOR}}}[$__range]))",
                   "{{action}} ({{reason}})"),),
            kind="table", width=8, options={"showHeader": True}),
        Panel("Draft swaps", (
            Target(f"sum by (result) (increase(tide_draft_swaps_total{{{VLLM}}}[$__range]))", "{{result}}"),),
            kind="stat", width=8),
    ))


def tide_dashboard() -> dict[str, Any]:
    variables = [
        datasource_variable(),
        query_variable("namespace", "Namespace", f"label_values({PER_POD}, namespace)", multi=False),
        query_variable("deployment", "TideDeployment",
                       f'label_values({PER_POD}{{namespace="$namespace"}}, {BY})', multi=True),
    ]
    decisions = f"increase(tide_operator_decisions_total{{{OPERATOR}, action=~\"%s\"}}[2m]) > 0"
    annotations = [
        annotation("Promotions", decisions % "Promote", "green", "Promoted draft", "{{tide_deployment}}: {{reason}}"),
        annotation("Rollbacks", decisions % "RollBack", "red", "Rolled back", "{{tide_deployment}}: {{reason}}"),
    ]
    return dashboard("tide-speculative-decoding", "TIDE / Speculative decoding",
                     "Acceptance, speculation state, capture, training and draft promotions of TideDeployments.",
                     rows=(speculation_row(), lifecycle_row()), variables=variables, annotations=annotations)


DASHBOARDS = {"tide-speculative-decoding": tide_dashboard}
OUT_DIR = Path(__file__).resolve().parents[3] / "charts" / "tide-operator" / "files" / "dashboards"


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write every dashboard to ``OUT_DIR`` (or to the directory given as the only argument)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    for name, build in DASHBOARDS.items():
        (out / f"{name}.json").write_text(render(build))
    return 0


if __name__ == "__main__":
    sys.exit(main())
