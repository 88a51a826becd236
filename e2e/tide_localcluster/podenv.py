"""What a kubelet computes before it starts a container: env, `$(VAR)` expansion, command line.

Pure functions over the pod as a plain dict (the API's JSON), so they are tested without a cluster.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

# A lookup returns a ConfigMap's or Secret's data (Secret values already base64-decoded), or None.
ObjectLookup = Callable[[str, str], Mapping[str, str] | None]

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_LABEL_PATH = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


class ContainerConfigError(ValueError):
    """Like the kubelet's CreateContainerConfigError: a referenced key or object is missing."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' rule: `$(VAR)` -> value if defined, else left as is; `$$` -> `$`."""

    def replace(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REF.sub(replace, text)


def field_ref(pod: Mapping[str, Any], path: str) -> str:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": status.get("podIP"), "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(p["ip"] for p in status.get("podIPs", [])),
    }
    if path in simple:
        return simple[path] or ""
    m = _LABEL_PATH.match(path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    raise ContainerConfigError(f"unsupported fieldRef.fieldPath {path!r}")


def _key_ref(kind: str, ref: Mapping[str, Any], lookup: ObjectLookup, namespace: str) -> str | None:
    data = lookup(namespace, ref["name"])
    optional = bool(ref.get("optional"))
    if data is None or ref["key"] not in data:
        if optional:
            return None
        what = f"{kind} {namespace}/{ref['name']}" if data is None else f"key {ref['key']!r} in {kind} {ref['name']}"
        raise ContainerConfigError(f"{what} not found")
    return data[ref["key"]]


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any], configmaps: ObjectLookup,
                  secrets: ObjectLookup) -> dict[str, str]:
    """envFrom first, then env in order; later entries may reference earlier ones with $(VAR)."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        kind, ref = (("ConfigMap", source["configMapRef"]) if "configMapRef" in source
                     else ("Secret", source["secretRef"]))
        data = (configmaps if kind == "ConfigMap" else secrets)(namespace, ref["name"])
        if data is None and not ref.get("optional"):
            raise ContainerConfigError(f"{kind} {namespace}/{ref['name']} not found")
        env.update({prefix + k: v for k, v in (data or {}).items()})
    for var in container.get("env", []):
        value = _env_value(pod, var, configmaps, secrets, env)
        if value is not None:
            env[var["name"]] = value
    return env


def _env_value(pod: Mapping[str, Any], var: Mapping[str, Any], configmaps: ObjectLookup,
               secrets: ObjectLookup, env: Mapping[str, str]) -> str | None:
    if "valueFrom" not in var:
        return expand(var.get("value", ""), env)
    source = var["valueFrom"]
    namespace = pod["metadata"]["namespace"]
    if "fieldRef" in source:
        return field_ref(pod, source["fieldRef"]["fieldPath"])
    if "configMapKeyRef" in source:
        return _key_ref("ConfigMap", source["configMapKeyRef"], configmaps, namespace)
    if "secretKeyRef" in source:
        return _key_ref("Secret", source["secretKeyRef"], secrets, namespace)
    if "resourceFieldRef" in source:
        resource = source["resourceFieldRef"]["resource"]
        kind, _, name = resource.partition(".")
        return str(pod_container_resources(pod, source["resourceFieldRef"].get("containerName"),
                                           kind).get(name, "0"))
    raise ContainerConfigError(f"env {var['name']}: unsupported valueFrom {sorted(source)}")


def pod_container_resources(pod: Mapping[str, Any], container_name: str | None, kind: str) -> Mapping[str, Any]:
    for c in pod["spec"]["containers"]:
        if container_name in (None, c["name"]):
            return c.get("resources", {}).get(kind, {})
    return {}


def decode_secret(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (data or {}).items()}


def command_line(container: Mapping[str, Any], entrypoint: list[str], env: Mapping[str, str]) -> list[str]:
    """command replaces the image entrypoint; args follow; both get $(VAR) expansion."""
    command = container.get("command") or entrypoint
    if not command:
        raise ContainerConfigError(
            f"container {container['name']}: no command and image {container.get('image')!r} has no "
            "entrypoint in the image catalog")
    return [expand(part, env) for part in [*command, *container.get("args", [])]]
