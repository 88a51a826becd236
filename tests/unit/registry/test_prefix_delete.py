"""Deletes stay under the deployment's prefix and report S3's per-key Errors (issue 13, item 1).

``delete_objects`` answers 200 even when keys fail; those keys must come back as failures, never be
counted as deleted, in the registry's pruning and in the operator's delete-on-delete alike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix, lies_under
from tide_contracts.registry import CaptureLimits, DraftRegistry, PruneIncomplete


@pytest.mark.parametrize(("key", "prefix", "under"), [
    ("llm/chat/captures/a.safetensors", "llm/chat/", True),
    ("llm/chat-b/captures/a", "llm/chat/", False),  # a sibling whose name starts like ours
    ("llm/chat", "llm/chat/", False),
    ("llm/chat/", "llm/chat/", False),  # the "folder" itself
    ("llm/chat/../chat-b/x", "llm/chat/", False),  # some stores normalise dot segments
    ("llm/chat/./x", "llm/chat/", False),
    ("llm/chat/x", "llm/chat", False),  # a prefix without its slash is refused
    ("anything", "/", False),
    ("x", "", False),
])
def test_a_key_lies_under_a_prefix_only_below_its_slash(key, prefix, under):
    assert lies_under(key, prefix) is under


class RecordingS3:
    """delete_objects as S3 answers it: 200, with Errors for the keys it could not delete."""

    def __init__(self, failing: dict[str, str] | None = None) -> None:
        self.failing = failing or {}
        self.requests: list[list[str]] = []

    def delete_objects(self, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        keys = [o["Key"] for o in Delete["Objects"]]
        self.requests.append(keys)
        return {"Errors": [{"Key": k, "Code": self.failing[k], "Message": "no"} for k in keys if k in self.failing]}


def test_per_key_errors_come_back_as_failures_and_batches_stay_under_the_s3_limit():
    keys = [f"ns/td/captures/{i:04d}" for i in range(1500)]
    s3 = RecordingS3({keys[3]: "AccessDenied", keys[1200]: "InternalError"})
    outcome = delete_under_prefix(s3, "b", "ns/td/captures/", keys)
    assert [len(r) for r in s3.requests] == [1000, 500]
    assert set(outcome.failed) == {keys[3], keys[1200]}
    assert len(outcome.deleted) == 1498
    assert keys[3] not in outcome.deleted
    assert "AccessDenied" in outcome.describe_failures()


@pytest.mark.parametrize("prefix", ["", "/", "ns/td"])
def test_an_empty_or_open_prefix_deletes_nothing(prefix):
    s3 = RecordingS3()
    with pytest.raises(DeletionRefused):
        delete_under_prefix(s3, "b", prefix, ["ns/td/x"])
    assert s3.requests == []


def test_one_foreign_key_refuses_the_whole_delete_before_any_request():
    s3 = RecordingS3()
    with pytest.raises(DeletionRefused, match="other-team"):
        delete_under_prefix(s3, "b", "ns/td/", ["ns/td/a", "other-team/keep.json"])
    assert s3.requests == []


def test_pruning_never_counts_a_key_s3_refused(s3_endpoint: str) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                          aws_access_key_id="t", aws_secret_access_key="t")
    client.create_bucket(Bucket="prune-errors")
    registry = DraftRegistry(client, "prune-errors", "ns/td")
    for i in range(3):
        registry.put_capture(f"c{i}.safetensors", b"x", samples=10)
    listing = registry.list_captures()
    refused = listing[0].key

    def refuse_one(params: dict[str, Any], **_: Any) -> None:  # S3 keeps the first key: an Errors entry
        params["Delete"]["Objects"] = [o for o in params["Delete"]["Objects"] if o["Key"] != refused]

    client.meta.events.register("provide-client-params.s3.DeleteObjects", refuse_one)
    wrapped = _ErrorsFor(client, {refused: "AccessDenied"})
    registry.client = wrapped
    with pytest.raises(PruneIncomplete, match="AccessDenied") as failure:
        registry.prune_captures(CaptureLimits(max_samples=0), datetime.now(UTC), captures=listing)
    assert set(failure.value.deleted) == {c.key for c in listing[1:]}
    remaining = [o["Key"] for o in client.list_objects_v2(Bucket="prune-errors").get("Contents", [])]
    assert remaining == [refused]


class _ErrorsFor:
    """A real boto3 client whose delete_objects also reports Errors for chosen keys (as S3 does)."""

    def __init__(self, client: Any, errors: dict[str, str]) -> None:
        self._client, self._errors = client, errors

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]:
        asked = [o["Key"] for o in kwargs["Delete"]["Objects"]]
        answer = self._client.delete_objects(**kwargs)
        answer["Errors"] = [{"Key": k, "Code": c, "Message": "denied"} for k, c in self._errors.items() if k in asked]
        return answer
