"""The placement benchmark's parts: fleet shapes, lent replicas on the operator's loop, the report."""
