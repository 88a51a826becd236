"""`tide`: look at TideDeployments and act on them from a terminal (also `kubectl tide`).

- `tide status NAME`: phase, conditions, pools, draft, speculation, last decision, recent events.
- `tide get [NAME] [-A] [--watch]`: a kubectl-style table (listing.py).
- `tide history NAME`: the draft lineage from the S3 registry.
- `tide plot NAME --out tide.png`: acceptance length, speculation on/off and batch size over time
  from Prometheus, with promotions and rollbacks from the TideDeployment's Events.
- `tide pause|resume|pin|unpin|rotate-token NAME`: the edits a user would make with kubectl (verbs.py).
- `tide calibrate`: measure the cost profile and write its ConfigMap.
"""
