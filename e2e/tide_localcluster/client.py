"""A kubernetes client for the local plane (token auth, self-signed loopback certificate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kubernetes import client

if TYPE_CHECKING:
    from tide_localcluster.plane import PlaneInfo


def api_client(info: PlaneInfo) -> client.ApiClient:
    config = client.Configuration()
    config.host = info.server
    config.verify_ssl = False
    config.api_key = {"authorization": f"Bearer {info.token}"}
    import urllib3

    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    return client.ApiClient(config)
