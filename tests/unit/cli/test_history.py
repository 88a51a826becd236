from __future__ import annotations

import json

import pytest

from tide_operator.cli.history import as_document, draft_pool, lineage, registry_for, render_history

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


# ---- the draft pool (pool.json, issue 16) -------------------------------------------------------------

CODE_SIGNATURE = {"mean": [1.0, 0.0], "std": [1.0, 0.5], "tokens": 400}


def pool_json(revision: str = "0e9e39f") -> dict:
    return {"pool_version": 1, "target_revision": revision, "tokenizer_hash": "tok-1", "entries": [
        {"version": "initial", "signature": None, "added_at": 1764576000.0, "last_served_at": 1764576000.0},
        {"version": "v2", "signature": CODE_SIGNATURE, "added_at": 1764676800.0, "last_served_at": 1764676800.0},
        {"version": "v1", "signature": CODE_SIGNATURE, "added_at": 1764590400.0, "last_served_at": 1764684000.0}]}


def deployment(**spec: object) -> dict:
    return {**TD, "spec": {**TD["spec"], "target": {"model": "m", "revision": "0e9e39f"}, **spec}}


def test_history_lists_the_pool_of_the_current_target_and_what_serves(s3) -> None:
    put(s3, "drafts/v1/manifest.json", manifest("v1", None, "r1", 2.1, 2048))
    put(s3, "drafts/v2/manifest.json", manifest("v2", "v1", "r4", 2.4, 4096))
    put(s3, "promoted.json", {"version": "v1", "run_id": "r1", "target_revision": "0e9e39f",
                              "updated_at": "2025-12-02T13:00:00Z"})  # rolled back to v1
    put(s3, "pool.json", pool_json())
    registry = registry_for(TD, s3)
    rows, events = lineage(registry)
    pool = draft_pool(registry, deployment(draft={"initial": "/drafts/launch"}))
    assert [(r.version, r.signature_tokens, r.pinned, r.serving) for r in pool.entries] == [
        ("initial", None, False, False), ("v1", 400, False, True), ("v2", 400, False, False)]  # oldest first
    v1 = pool.entries[1]
    assert (v1.added_at, v1.last_served_at) == ("2025-12-01T12:00:00Z", "2025-12-02T14:00:00Z")
    text = render_history(rows, events, "llm/chat", pool)
    lines = text.splitlines()
    start = lines.index("Draft pool of target revision 0e9e39f (* serves):")
    assert lines[start + 1].split() == ["VERSION", "ADDED", "LAST", "SERVED", "SIGNATURE", "TOKENS", "PINNED"]
    assert lines[start + 2].split() == ["initial", "2025-12-01T08:00:00Z", "2025-12-01T08:00:00Z", "-", "-"]
    assert lines[start + 3].split() == ["*", "v1", "2025-12-01T12:00:00Z", "2025-12-02T14:00:00Z", "400", "-"]

    pinned = draft_pool(registry, deployment(control={"draftPin": "v2"}))  # the pin serves, not the pointer
    assert [(r.version, r.pinned, r.serving) for r in pinned.entries if r.pinned or r.serving] == [("v2", True, True)]
    assert render_history(rows, events, "llm/chat", pinned).splitlines()[start + 4].split()[-1] == "pinned"
    doc = as_document(rows, events, pinned)
    assert doc["pool"]["target_revision"] == "0e9e39f"
    assert [(e["version"], e["pinned"], e["serving"]) for e in doc["pool"]["entries"]] == [
        ("initial", False, False), ("v1", False, False), ("v2", True, True)]


def test_an_index_of_another_target_revision_shows_as_empty_with_a_note(s3) -> None:
    put(s3, "pool.json", pool_json(revision="5d41402"))
    registry = registry_for(TD, s3)
    pool = draft_pool(registry, deployment())
    assert pool.entries == []
    lines = render_history([], [], "llm/chat", pool).splitlines()
    assert lines[-2:] == ["Draft pool of target revision 0e9e39f (* serves):",
                          "  empty: pool.json indexes target revision 5d41402, not 0e9e39f: empty for this target "
                          "(replaced at its next record)"]
    assert as_document([], [], pool)["pool"] == {"target_revision": "0e9e39f", "entries": [], "note": lines[-1][9:]}
    assert draft_pool(registry_for({**TD, "metadata": {"name": "other", "namespace": "llm"}}, s3),
                      deployment()).note == "no draft recorded yet"


def test_history_output_json_carries_the_pool(s3, monkeypatch, capsys) -> None:
    import argparse

    from tide_operator.cli import __main__ as cli
    from tide_operator.cli import history, kube

    put(s3, "pool.json", pool_json())
    put(s3, "promoted.json", {"version": "v2", "run_id": "r4", "target_revision": "0e9e39f",
                              "updated_at": "2025-12-02T13:00:00Z"})
    monkeypatch.setattr(kube, "read_tide_deployment", lambda api, namespace, name: deployment())
    monkeypatch.setattr(history, "s3_client", lambda obj, credentials, endpoint: s3)
    args = argparse.Namespace(name="chat", credentials_from_secret=False, s3_endpoint=None, output="json")
    assert cli.run_history(args, None, "llm") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(e["version"], e["serving"]) for e in doc["pool"]["entries"]] == [
        ("initial", False), ("v1", False), ("v2", True)]
    bad = {**TD, "metadata": {"name": "bad", "namespace": "llm"}}
    s3.put_object(Bucket="tide", Key="llm/bad/pool.json", Body=b'{"pool_version": 2}')
    assert draft_pool(registry_for(bad, s3), deployment()).note.startswith("pool.json cannot be read")
