"""vLLM serving plugin: hidden-state capture, draft hot swap, speculation control.

Contract: docs/contracts/serving-control.md. Launch flags:
`--worker-extension-cls tide_serving.worker_extension.TideWorkerExtension`,
`--scheduler-cls tide_serving.scheduler.SpeculationSwitchScheduler`, and
`VLLM_PLUGINS=tide_control` (the endpoint plugin adding the /tide/v1 routes and metrics).
"""

PLUGIN_VERSION = "0.1.0"
