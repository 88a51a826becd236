"""Kopf's login with this process's User-Agent (process_identity.py) instead of ``kopf/<version>``."""

from __future__ import annotations

from typing import Any

import aiohttp
import kopf

from tide_operator.process_identity import USER_AGENT


@kopf.on.login()
async def login_with_user_agent(logger: kopf.Logger, settings: kopf.OperatorSettings,
                                **_: Any) -> kopf.AiohttpSession | None:
    """Kopf's own login (in-cluster, else kubeconfig), in a session that sends our User-Agent.

    Kopf builds its session from a ConnectionInfo with a fixed agent and no way to add headers; this
    builds the same session (auth header, TLS, proxy, trust_env) with ours.
    """
    info = kopf.login_via_client(logger=logger, settings=settings)
    if info is None:
        return None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers={**info.as_http_headers(), "User-Agent": USER_AGENT}, proxy=info.proxy_url,
        trust_env=info.trust_env)
    return kopf.AiohttpSession(server=info.server, default_namespace=info.default_namespace,
                               priority=info.priority, expiration=info.expiration, aiohttp_session=session)
