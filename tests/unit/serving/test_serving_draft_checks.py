"""Draft verification before the engine is touched: manifest, checksums, target revision, architecture."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tide_contracts.serving_control import ErrorCode
from tide_serving.draft_fetch import fetch_draft, promoted_source, prune_downloads
from tide_serving.draft_source import (
    DraftArchitecture,
    DraftRefused,
    architecture_from_config,
    verify_draft_dir,
)


def speculators_config(aux: list[int], hidden: int = 128, vocab: int = 512) -> dict:
    layer = {"model_type": "llama", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": 256,
             "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32}
    return {"speculators_model_type": "eagle3", "draft_vocab_size": vocab, "target_hidden_size": hidden,
            "eagle_aux_hidden_state_layer_ids": aux, "transformer_layer_config": layer}


def make_version(root: Path, *, aux: list[int] | None = None, revision: str = "rev-1",
                 version: str | None = "v4", hidden: int = 128) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(speculators_config(aux or [1, 2, 3], hidden)))
    (root / "model.safetensors").write_bytes(b"weights")
    files = {n: {"sha256": hashlib.sha256((root / n).read_bytes()).hexdigest(),
                 "bytes": (root / n).stat().st_size} for n in ("config.json", "model.safetensors")}
    manifest = {"kind": "draft", "run_id": "r1", "created_at": "2026-12-02T00:00:00+00:00",
                "target_revision": revision, "files": files, "tokenizer_hash": "tok-a"}
    manifest |= {"version": version} if version else {}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


SERVING = architecture_from_config(speculators_config([1, 2, 3]))


def verify(path: Path, expected_version: str | None = None, tokenizer: str | None = "tok-a") -> object:
    return verify_draft_dir(path, serving_revision="rev-1", serving=SERVING,
                            expected_version=expected_version, fallback_version=path.name,
                            tokenizer_hash=tokenizer)


def refusal(path: Path, expected_version: str | None = None) -> DraftRefused:
    with pytest.raises(DraftRefused) as err:
        verify(path, expected_version)
    return err.value


def test_a_compatible_draft_passes(tmp_path: Path) -> None:
    draft = verify(make_version(tmp_path / "v4"))
    assert (draft.version, draft.target_revision) == ("v4", "rev-1")
    assert draft.architecture == SERVING


def test_version_falls_back_to_the_directory_name(tmp_path: Path) -> None:
    assert verify(make_version(tmp_path / "v8", version=None)).version == "v8"


def test_checksum_mismatch_is_refused_first(tmp_path: Path) -> None:
    path = make_version(tmp_path / "v4", revision="other", aux=[0, 1, 2])
    (path / "model.safetensors").write_bytes(b"tampered")
    r = refusal(path)
    assert r.code is ErrorCode.CHECKSUM_MISMATCH
    assert "model.safetensors" in r.message


@pytest.mark.parametrize(("kwargs", "code", "needle"), [
    ({"revision": "rev-2"}, ErrorCode.TARGET_REVISION_MISMATCH, "rev-2"),
    ({"aux": [0, 1, 2]}, ErrorCode.ARCHITECTURE_MISMATCH, "eagle_aux_hidden_state_layer_ids"),
    ({"hidden": 256}, ErrorCode.ARCHITECTURE_MISMATCH, "target_hidden_size"),
])
def test_incompatible_drafts_say_why(tmp_path: Path, kwargs: dict, code: ErrorCode, needle: str) -> None:
    r = refusal(make_version(tmp_path / "v4", **kwargs))
    assert r.code is code
    assert needle in r.message


def test_another_tokenizer_is_refused(tmp_path: Path) -> None:
    path = make_version(tmp_path / "v4")
    with pytest.raises(DraftRefused) as err:
        verify(path, tokenizer="tok-b")
    assert err.value.code is ErrorCode.TARGET_REVISION_MISMATCH
    assert "tokenizer" in err.value.message
    assert verify(path, tokenizer=None).version == "v4"  # the pod does not know its tokenizer's hash


def test_missing_or_malformed_manifest(tmp_path: Path) -> None:
    path = make_version(tmp_path / "v4")
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps(manifest | {"files": {}}))
    assert refusal(path).code is ErrorCode.MANIFEST_INVALID
    (path / "manifest.json").write_text(json.dumps(manifest | {"surprise": 1}))
    assert "surprise" in refusal(path).message
    (path / "manifest.json").unlink()
    assert "manifest.json is missing" in refusal(path).message
    assert refusal(make_version(tmp_path / "v5"), expected_version="v6").code is ErrorCode.MANIFEST_INVALID


def test_manifest_may_not_point_outside_the_version(tmp_path: Path) -> None:
    path = make_version(tmp_path / "v4")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["../secret"] = {"sha256": "0" * 64, "bytes": 0}
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert refusal(path).code is ErrorCode.MANIFEST_INVALID


def test_architecture_roundtrips_through_json() -> None:
    assert DraftArchitecture.from_json(json.loads(json.dumps(SERVING.to_json()))) == SERVING


def test_local_source_must_exist(tmp_path: Path) -> None:
    with pytest.raises(DraftRefused) as err:
        fetch_draft(str(tmp_path / "nope"), tmp_path / "dl")
    assert err.value.code is ErrorCode.SOURCE_UNAVAILABLE


def test_s3_fetch_and_promoted_pointer(tmp_path: Path) -> None:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    src = make_version(tmp_path / "v4")
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="reg")
        s3.create_bucket(Bucket="empty")
        for f in src.iterdir():
            s3.put_object(Bucket="reg", Key=f"team/drafts/v4/{f.name}", Body=f.read_bytes())
        pointer = {"version": "v4", "run_id": "r1", "target_revision": "rev-1",
                   "updated_at": "2026-12-02T00:00:00+00:00"}
        s3.put_object(Bucket="reg", Key="team/promoted.json", Body=json.dumps(pointer).encode())
        assert promoted_source("s3://reg/team", "rev-0") is None  # pinned to another target: no draft
        assert promoted_source("s3://reg/empty", "rev-1") is None
        source, version, _ = promoted_source("s3://reg/team", "rev-1")
        assert (source, version) == ("s3://reg/team/drafts/v4", "v4")
        launch = {**pointer, "version": "initial", "run_id": "initial"}  # the pool recalled the launch draft
        s3.put_object(Bucket="reg", Key="team/promoted.json", Body=json.dumps(launch).encode())
        assert promoted_source("s3://reg/team", "rev-1") is None  # serve what the pod launched with
        s3.put_object(Bucket="reg", Key="team/promoted.json", Body=json.dumps(pointer).encode())
        local = fetch_draft(source, tmp_path / "dl")
        assert verify(local).version == "v4"
        with pytest.raises(DraftRefused) as err:
            fetch_draft("s3://reg/team/drafts/v9", tmp_path / "dl")
        assert err.value.code is ErrorCode.SOURCE_UNAVAILABLE


def test_old_downloads_are_pruned(tmp_path: Path) -> None:
    import os

    for i in range(5):
        (tmp_path / f"d{i}").mkdir()
        os.utime(tmp_path / f"d{i}", (1000 + i, 1000 + i))
    prune_downloads(tmp_path, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d2", "d3", "d4"]
