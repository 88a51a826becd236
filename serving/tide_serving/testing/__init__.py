"""Test fixtures for the serving plugin (need torch: the vLLM environment)."""
