"""`python -m tide_vllm_sim <vLLM server flags> [--sim-scenario FILE] [--sim-seed N]`."""

from tide_vllm_sim.server import serve

serve()
