"""TIDE operator: keeps speculative decoding on vLLM aligned with live traffic."""
