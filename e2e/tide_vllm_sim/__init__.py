"""A deterministic stand-in for the vLLM OpenAI server plus the TIDE serving plugin (docs/simulator.md).

Same command line, same routes, same metric names and labels as vLLM; the plugin's control routes
and metrics from docs/contracts/serving-control.md; acceptance from a scenario (draft version x
traffic domain), batch size from the load, shards in the trainer's format when capture is on.
"""
