"""Pods that start later serve the promoted draft (TIDE_REGISTRY_URI), read from loopback S3."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tide_contracts.registry import PromotedPointer


def _publish(s3: Any, version: str, target_revision: str = "rev-1") -> None:
    s3.create_bucket(Bucket="reg")
    files = {"config.json": b"{}", "model.safetensors": b"w-" + version.encode()}
    for name, data in files.items():
        s3.put_object(Bucket="reg", Key=f"chat/drafts/{version}/{name}", Body=data)
    manifest = {"kind": "draft", "run_id": "r4", "version": version, "created_at": "2026-01-01T00:00:00Z",
                "target_revision": target_revision,
                "files": {n: {"sha256": hashlib.sha256(d).hexdigest(), "bytes": len(d)} for n, d in files.items()}}
    s3.put_object(Bucket="reg", Key=f"chat/drafts/{version}/manifest.json", Body=json.dumps(manifest).encode())
    pointer = PromotedPointer(version=version, run_id="r4", target_revision=target_revision,
                              updated_at="2026-01-01T00:00:00Z")
    s3.put_object(Bucket="reg", Key="chat/promoted.json", Body=pointer.model_dump_json().encode())


def test_a_new_pod_serves_the_promoted_draft(start_sim: Any, s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(s3, "v4")
    monkeypatch.setenv("TIDE_REGISTRY_URI", "s3://reg/chat")
    pod = start_sim().pod
    assert pod.engine.draft_version == "v4"
    assert pod.draft_source == "s3://reg/chat/drafts/v4"
    assert pod.warnings == []


def test_an_unreadable_pointer_keeps_the_launch_draft_with_a_warning(
    start_sim: Any, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDE_REGISTRY_URI", "s3://absent-bucket/chat")
    pod = start_sim().pod
    assert pod.engine.draft_version == "initial"
    assert "promoted.json" in pod.warnings[0]


def test_a_promoted_draft_for_another_target_is_not_served(
    start_sim: Any, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _publish(s3, "v5", target_revision="rev-0")
    monkeypatch.setenv("TIDE_REGISTRY_URI", "s3://reg/chat")
    pod = start_sim().pod
    assert pod.engine.draft_version == "initial"
    assert "rev-0" in pod.warnings[0]


def test_a_pod_goes_back_to_its_launch_draft_without_a_manifest_as_the_plugin_does(
    start_sim: Any, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tide_contracts import serving_control as sc
    from tide_vllm_sim.drafts import DraftLoadError

    _publish(s3, "v4")
    monkeypatch.setenv("TIDE_REGISTRY_URI", "s3://reg/chat")
    pod = start_sim().pod
    assert pod.engine.draft_version == "v4"
    launch = pod.launch_source
    assert launch
    back = pod.load_draft(sc.DraftLoadRequest(source=launch + "/", version=None))
    assert (back.previous_version, back.draft.version) == ("v4", "initial")
    with pytest.raises(DraftLoadError) as err:
        pod.load_draft(sc.DraftLoadRequest(source=launch, version="v9"))
    assert err.value.code is sc.ErrorCode.INVALID_REQUEST
