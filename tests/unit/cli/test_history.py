from __future__ import annotations

import json

import pytest

from tide_operator.cli.history import lineage, registry_for, render_history

moto = pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

TD = {"metadata": {"name": "chat", "namespace": "llm"}, "spec": {"storage": {"s3": {"bucket": "tide"}}}}
SHA = "0" * 64


def manifest(version: str, parent: str | None, run_id: str, length: float, samples: int) -> dict:
    return {"kind": "draft", "run_id": run_id, "version": version, "created_at": "2025-12-01T10:00:00Z",
            "promoted_at": f"2025-12-0{version[1]}T12:00:00Z", "parent": parent, "target_revision": "0e9e39f",
            "training_window": ["2025-12-01T08:00:00Z", "2025-12-01T09:30:00Z"],
            "samples": {"train_requests": samples}, "eval": {"candidate_acceptance_length": length},
            "files": {"model.safetensors": {"sha256": SHA, "bytes": 1}}}


@pytest.fixture
def s3():
    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="tide")
        yield client


def put(client, key: str, body: dict) -> None:
    client.put_object(Bucket="tide", Key=f"llm/chat/{key}", Body=json.dumps(body).encode())


def test_lineage_reads_manifests_pointer_and_history(s3) -> None:
    put(s3, "drafts/v1/manifest.json", manifest("v1", None, "r1", 2.1, 2048))
    put(s3, "drafts/v2/manifest.json", manifest("v2", "v1", "r4", 2.4, 4096))
    put(s3, "drafts/v3/.claim", {})  # claimed, never finished
    put(s3, "promoted.json", {"version": "v1", "run_id": "r1", "target_revision": "0e9e39f",
                              "updated_at": "2025-12-02T13:00:00Z"})
    put(s3, "history/00000001-20251201T120000Z-promote.json",
        {"action": "promote", "at": "2025-12-01T12:00:00Z", "version": "v1", "run_id": "r1"})
    put(s3, "history/00000002-20251202T120000Z-promote.json",
        {"action": "promote", "at": "2025-12-02T12:00:00Z", "version": "v2", "previous": "v1", "run_id": "r4"})
    put(s3, "history/00000003-20251202T130000Z-rollback.json",
        {"action": "rollback", "at": "2025-12-02T13:00:00Z", "version": "v1", "previous": "v2",
         "reason": "acceptance fell 7% on live traffic"})

    rows, events = lineage(registry_for(TD, s3))
    assert [(r.version, r.parent, r.served, r.note) for r in rows] == [
        ("v1", None, True, ""), ("v2", "v1", False, ""), ("v3", None, False, "incomplete")]
    assert rows[1].eval_acceptance_length == 2.4
    assert rows[1].samples == 4096
    assert [e.action for e in events] == ["promote", "promote", "rollback"]

    text = render_history(rows, events, "llm/chat")
    lines = text.splitlines()
    assert lines[0] == "Draft lineage of llm/chat:"
    assert lines[2].split()[:7] == ["*", "v1", "-", "r1", "2025-12-01T12:00:00Z", "2048", "2.10"]
    assert lines[2].rstrip().endswith("serving")
    assert "acceptance fell 7% on live traffic" in text


def test_empty_registry_says_the_initial_draft_serves(s3) -> None:
    rows, events = lineage(registry_for(TD, s3))
    assert rows == []
    assert events == []
    assert "no draft promoted yet" in render_history(rows, events, "llm/chat")
