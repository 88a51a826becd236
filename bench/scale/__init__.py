"""The scale benchmark's parts (bench/scale_bench.py runs them): pure report, measurement, fleet."""
