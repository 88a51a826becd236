"""Typed TideDeployment spec and status; the CRD schema is generated from these models."""
