"""`python -m tide_vllm_sim <vLLM server flags>`."""

from tide_vllm_sim.server import serve

serve()
