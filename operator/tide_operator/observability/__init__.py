"""Observability assets generated from code: the Grafana dashboards of the chart."""
