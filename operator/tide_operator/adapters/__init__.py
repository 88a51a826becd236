"""Adapters: the only modules that do I/O (Kubernetes, Prometheus, S3, the pods' control API)."""
