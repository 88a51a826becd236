"""The CLI's Kubernetes reads: the TideDeployment and its Events (kubernetes client, kubeconfig)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tide_operator.api import GROUP, KIND, PLURAL, VERSION


@dataclass(frozen=True)
class EventNote:
    time: str | None  # RFC 3339
    type: str
    reason: str
    message: str


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A client from the kubeconfig (or in-cluster config when there is none)."""
    from kubernetes import config

    try:
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except config.ConfigException:
        if kubeconfig:
            raise
        try:
            config.load_incluster_config()
        except config.ConfigException as err:
            missing = "no kubeconfig ($KUBECONFIG or ~/.kube/config) and not inside a cluster"
            raise config.ConfigException(missing) from err
        from kubernetes import client

        return client.ApiClient()


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig context's namespace, like kubectl; ``default`` otherwise."""
    from kubernetes import config

    try:
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    except config.ConfigException:
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
    return str((chosen or {}).get("context", {}).get("namespace") or "default")


def read_tide_deployment(api: Any, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    obj: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name)
    return obj


def _rfc3339(moment: datetime | None) -> str | None:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else None


def tide_events(api: Any, namespace: str, name: str) -> list[EventNote]:
    """The TideDeployment's Events, oldest first."""
    from kubernetes import client

    selector = f"involvedObject.kind={KIND},involvedObject.name={name}"
    items = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items
    notes = [EventNote(_rfc3339(e.last_timestamp or e.event_time or e.first_timestamp
                                or e.metadata.creation_timestamp), e.type or "Normal", e.reason or "", e.message or "")
             for e in items]
    return sorted(notes, key=lambda note: note.time or "")


def read_secret(api: Any, namespace: str, name: str) -> dict[str, str]:
    """A Secret's data, decoded (for --credentials-from-secret; needs `get secrets` there)."""
    import base64

    from kubernetes import client

    data = client.CoreV1Api(api).read_namespaced_secret(name, namespace).data or {}
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def list_tide_deployments(api: Any, namespace: str | None) -> list[dict[str, Any]]:
    """In one namespace, or in all (``None``), sorted like kubectl: by namespace, then name."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    listed = (custom.list_cluster_custom_object(GROUP, VERSION, PLURAL) if namespace is None
              else custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL))
    items: list[dict[str, Any]] = listed.get("items", [])
    return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))


def watch_tide_deployments(api: Any, namespace: str | None, timeout_s: int | None) -> Any:
    """(event type, object) as the API server streams them; ends after ``timeout_s`` (None: never)."""
    from kubernetes import client, watch

    custom = client.CustomObjectsApi(api)
    options: dict[str, Any] = {"timeout_seconds": timeout_s} if timeout_s else {}
    if namespace is None:
        stream = watch.Watch().stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, **options)
    else:
        stream = watch.Watch().stream(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL,
                                      **options)
    for event in stream:
        yield event["type"], event["object"]


def patch_tide_deployment(api: Any, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (a ``None`` value removes the field), validated by the API server's schema."""
    from kubernetes import client

    obj: dict[str, Any] = client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, patch)
    return obj
