"""vLLM serving plugin: hidden-state capture, draft hot swap, speculation control."""
