"""`tide`: look at TideDeployments from a terminal (also `kubectl tide`, via the kubectl-tide script).

- `tide status NAME`: phase, conditions, pools, draft, speculation, last decision, recent events.
- `tide plot NAME --out tide.png`: acceptance length, speculation on/off and batch size over time
  from Prometheus, with promotions and rollbacks from the TideDeployment's Events.
"""
