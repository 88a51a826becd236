"""Storage tenancy: which bucket, prefix, endpoint and KMS key a TideDeployment may use (pure).

Without ``spec.storage.s3.credentialsSecret`` the operator reads, writes and deletes under its own
ambient identity (IRSA, an instance role), which can reach every tenant's data: such a spec gets
only the operator-configured buckets and endpoint and the prefix the operator derives,
``<namespace>/<name>/`` (namespaces and names hold no ``/``, so no derived prefix contains
another). A custom bucket, prefix, endpoint or KMS key needs the tenant's own credentials; any
endpoint, with or without them, must be allowlisted (the operator connects to it).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.config import StorageConfig

Problem = tuple[str, str]
S3_FIELD = "spec.storage.s3"
KMS_FIELD = "spec.control.capture.kmsKeyId"


def derived_prefix(namespace: str, name: str) -> str:
    """The registry prefix of a deployment without spec.storage.s3.prefix (no trailing slash)."""
    return f"{namespace}/{name}"


def _origin(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port, parts.path.strip("/")


def endpoint_allowed(endpoint: str, allowed: tuple[str, ...]) -> bool:
    """``endpoint`` is one of ``allowed`` (scheme, host, and port unless the entry has none); no path."""
    try:
        scheme, host, port, path = _origin(endpoint)
    except ValueError:  # a port that is not a number
        return False
    for entry in allowed:
        e_scheme, e_host, e_port, _ = _origin(entry)
        if (scheme, host) == (e_scheme, e_host) and e_port in (None, port) and not path:
            return True
    return False


def storage_violations(spec: TideDeploymentSpec, namespace: str, name: str, config: StorageConfig) -> list[Problem]:
    """Each refused storage field with the reason; empty when the spec may use what it names."""
    s3 = spec.storage.s3
    if s3.credentials_secret:
        allowed = (*filter(None, (config.endpoint,)), *config.allowed_endpoints)
        if s3.endpoint and not endpoint_allowed(s3.endpoint, allowed):
            return [(f"{S3_FIELD}.endpoint", f"{s3.endpoint} is not in the operator's storage.allowedEndpoints")]
        return []
    needs = "needs the deployment's own credentialsSecret"
    problems: list[Problem] = []
    if s3.bucket not in config.buckets:
        lent = ", ".join(config.buckets) or "none"
        problems.append((f"{S3_FIELD}.bucket",
                         f"{s3.bucket!r} {needs} (the operator's identity may use: {lent})"))
    derived = derived_prefix(namespace, name)
    if s3.prefix is not None and s3.prefix.strip("/") != derived:
        problems.append((f"{S3_FIELD}.prefix", f"{s3.prefix!r} {needs} (the operator's identity uses {derived}/)"))
    if s3.endpoint and not (config.endpoint and endpoint_allowed(s3.endpoint, (config.endpoint,))):
        problems.append((f"{S3_FIELD}.endpoint", f"{s3.endpoint} {needs}"))
    if spec.control.capture.kms_key_id is not None:
        problems.append((KMS_FIELD, f"a KMS key of the spec's choosing {needs}"))
    return problems


def with_storage_defaults(spec: TideDeploymentSpec, config: StorageConfig) -> TideDeploymentSpec:
    """The spec as every writer uses it: the operator's endpoint where the spec names none."""
    s3 = spec.storage.s3
    if s3.endpoint or not config.endpoint:
        return spec
    storage = spec.storage.model_copy(update={"s3": s3.model_copy(update={"endpoint": config.endpoint})})
    return spec.model_copy(update={"storage": storage})
