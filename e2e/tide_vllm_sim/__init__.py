"""A stand-in for the vLLM OpenAI server: same command line, same routes, same metric names.

Used where a real engine is not the point (operator tests on the local control plane). It grows
into the control loop's deterministic simulator (scenario-driven acceptance and load).
"""
