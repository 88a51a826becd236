"""Typed contracts shared by the operator, the trainer and the serving plugin (docs/contracts/)."""
