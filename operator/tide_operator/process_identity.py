"""Who this operator process is to the API server: its Lease holder identity and its User-Agent.

Two replicas run as the same ServiceAccount, so the audit log tells them apart only by User-Agent:
every client of the process (Kopf's session, see kopf_login.py; the ``kubernetes`` ApiClients of
cluster.py and the Lease) sends ``tide-operator/<version> (<pod>_<random>)``, the same identity
that holds the leader Lease.
"""

from __future__ import annotations

import os
import secrets
import socket

from tide_operator.control.leadership import holder_identity, user_agent
from tide_operator.metrics import package_version

IDENTITY = holder_identity(os.environ.get("HOSTNAME") or socket.gethostname(), secrets.token_hex(4))
USER_AGENT = user_agent(package_version(), IDENTITY)
