"""Delete a TideDeployment's S3 artifacts (captures, candidates, drafts, pointer, history).

Only on an explicit opt-in (spec.storage.s3.deleteArtifactsOnDelete): by default everything
promoted or stored outlives the custom resource. The spec is checked against storage tenancy
first (a refused spec deletes nothing), and every key must lie under the deployment's prefix.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from kubernetes.client.rest import ApiException

from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix
from tide_operator.adapters.cluster import Cluster
from tide_operator.api import SpecError, parse_spec
from tide_operator.config import OperatorConfig
from tide_operator.control.storage_tenancy import storage_violations, with_storage_defaults
from tide_operator.passes.control_step import make_registry


class ArtifactsUnreachable(RuntimeError):
    """The artifacts could not be deleted (bad or refused spec, credentials gone, S3 unreachable)."""


class ArtifactsRefused(ArtifactsUnreachable):
    """The spec is invalid or refused by storage tenancy: no retry can change that, nothing is deleted."""


def delete_deployment_artifacts(body: dict[str, Any], cluster: Cluster, config: OperatorConfig,
                                under: str = "") -> int:
    """Delete every object under the deployment's prefix (or its ``under`` folder, e.g. ``captures``).

    Returns how many S3 deleted; raises ArtifactsUnreachable naming what was kept.
    """
    meta = body["metadata"]
    try:
        spec = parse_spec(body.get("spec"))
    except SpecError as e:
        raise ArtifactsRefused(f"S3 artifacts kept: {e.field}: {e.message}") from e
    refused = storage_violations(spec, meta["namespace"], meta["name"], config.storage)
    if refused:  # a refused spec never reached S3 and does not now: nothing is deleted
        field, message = refused[0]
        raise ArtifactsRefused(f"S3 artifacts kept: {field}: {message}")
    try:
        registry = make_registry(meta["name"], meta["namespace"], with_storage_defaults(spec, config.storage), cluster)
    except ApiException as e:
        raise ArtifactsUnreachable(f"S3 artifacts kept: cannot reach the registry ({e})") from e
    prefix = registry.key(under) + "/"
    deleted = 0
    try:
        pages = registry.client.get_paginator("list_objects_v2").paginate(Bucket=registry.bucket, Prefix=prefix)
        for page in pages:
            keys = [obj["Key"] for obj in page.get("Contents", [])]
            outcome = delete_under_prefix(registry.client, registry.bucket, prefix, keys) if keys else None
            deleted += len(outcome.deleted) if outcome else 0
            if outcome and outcome.failed:  # S3 answers 200 with per-key Errors: those keys are still there
                raise ArtifactsUnreachable(f"S3 artifacts under s3://{registry.bucket}/{prefix} partly kept "
                                           f"({deleted} deleted): {outcome.describe_failures()}")
    except (ClientError, BotoCoreError, OSError, DeletionRefused) as e:
        raise ArtifactsUnreachable(f"S3 artifacts under s3://{registry.bucket}/{prefix} kept: {e}") from e
    return deleted
