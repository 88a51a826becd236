"""Delete a TideDeployment's S3 artifacts (captures, candidates, drafts, pointer, history).

Only on an explicit opt-in (spec.storage.s3.deleteArtifactsOnDelete): by default everything
promoted or stored outlives the custom resource.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from kubernetes.client.rest import ApiException

from tide_operator.api import SpecError, parse_spec
from tide_operator.cluster import Cluster
from tide_operator.control_step import make_registry


class ArtifactsUnreachable(RuntimeError):
    """The artifacts could not be deleted (bad spec, credentials gone, S3 unreachable)."""


def delete_deployment_artifacts(body: dict[str, Any], cluster: Cluster) -> int:
    meta = body["metadata"]
    try:
        spec = parse_spec(body.get("spec"))
        registry = make_registry(meta["name"], meta["namespace"], spec, cluster)
    except (SpecError, ApiException) as e:
        raise ArtifactsUnreachable(f"S3 artifacts kept: cannot reach the registry ({e})") from e
    prefix = registry.key() + "/"
    deleted = 0
    try:
        pages = registry.client.get_paginator("list_objects_v2").paginate(Bucket=registry.bucket, Prefix=prefix)
        for page in pages:
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                registry.client.delete_objects(Bucket=registry.bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
    except (ClientError, BotoCoreError, OSError) as e:
        raise ArtifactsUnreachable(f"S3 artifacts under s3://{registry.bucket}/{prefix} kept: {e}") from e
    return deleted
