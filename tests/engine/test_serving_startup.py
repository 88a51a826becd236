"""A pod that starts (scale-up, restart) serves the registry's promoted draft, not its launch draft;
a pod launched without the plugin's scheduler says speculation needs a restart (the fallback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving_vllm_helpers import TOKEN, make_bucket, upload_dir

from tide_contracts import serving_control as sc
from tide_contracts.registry import PromotedPointer

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def promoted_registry(tiny_models, s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    import boto3

    from tide_serving.testing.tiny_models import publish_draft

    bucket = make_bucket()
    version_dir = publish_draft(tiny_models.good_draft, tmp_path_factory.mktemp("v7") / "v7", version="v7")
    upload_dir(version_dir, bucket, "reg/drafts/v7")
    pointer = PromotedPointer(version="v7", run_id="fixture-v7", target_revision="tiny-bigram-1",
                              updated_at="2026-12-02T00:00:00+00:00")
    boto3.client("s3").put_object(Bucket=bucket, Key="reg/promoted.json", Body=pointer.model_dump_json())
    return f"s3://{bucket}/reg"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """As the operator mounts the control-token Secret: a file, re-read on change."""
    path = tmp_path_factory.mktemp("control") / "token"
    path.write_text(TOKEN)
    return path


@pytest.fixture(scope="module")
def server(tiny_models, promoted_registry: str, token_file: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from tide_serving.testing.server import ServerConfig, start_server

    tmp = tmp_path_factory.mktemp("startup")
    env = {sc.CONTROL_TOKEN_FILE_ENV: str(token_file), "TIDE_STATE_DIR": str(tmp / "state"),
           "TIDE_TARGET_REVISION": "tiny-bigram-1", "TIDE_REGISTRY_URI": promoted_registry}
    srv = start_server(ServerConfig(target=tiny_models.target, draft=tiny_models.random_draft,
                                    log_path=tmp / "server.log", env=env, switch_scheduler=False))
    try:
        yield srv
    finally:
        srv.stop()


def test_starts_with_the_promoted_draft(server, promoted_registry: str) -> None:
    from tide_serving.testing.server import complete, metric_value, metrics_text

    status = sc.ServingControlClient(server.control_url, TOKEN).status()
    assert status.draft is not None
    assert status.draft.version == "v7"
    assert status.draft.source == f"{promoted_registry}/drafts/v7"
    assert not status.warnings
    before = metrics_text(server)
    complete(server, "w5 w6 w7", 30)
    after = metrics_text(server)
    drafted = (metric_value(after, "vllm:spec_decode_num_draft_tokens_total")
               - metric_value(before, "vllm:spec_decode_num_draft_tokens_total"))
    accepted = (metric_value(after, "vllm:spec_decode_num_accepted_tokens_total")
                - metric_value(before, "vllm:spec_decode_num_accepted_tokens_total"))
    assert accepted / drafted > 0.25  # the launch draft (random) would accept ~0
    assert metric_value(after, "tide_draft_info", version="v7") == 1.0


def test_speculation_switch_without_the_plugin_scheduler_needs_a_restart(server) -> None:
    client = sc.ServingControlClient(server.control_url, TOKEN)
    assert not client.status().speculation.runtime_control
    with pytest.raises(sc.ServingControlError) as refused:
        client.set_speculation(sc.SpeculationRequest(enabled=False))
    assert refused.value.status == 409
    assert refused.value.code is sc.ErrorCode.RESTART_REQUIRED


def test_control_routes_have_their_own_port_and_follow_the_token_file(server, token_file: Path) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(server.base_url + sc.STATUS_ROUTE, headers={"Authorization": f"Bearer {TOKEN}"})
    with pytest.raises(urllib.error.HTTPError) as on_api_port:
        urllib.request.urlopen(request, timeout=30)
    assert on_api_port.value.code == 404  # not on the OpenAI API port
    try:
        token_file.write_text("rotated")
        (token_file.parent / "previous-token").write_text(TOKEN)
        assert sc.ServingControlClient(server.control_url, "rotated").status().draft is not None
        assert sc.ServingControlClient(server.control_url, TOKEN).status().draft is not None  # the grace
        (token_file.parent / "previous-token").unlink()
        with pytest.raises(sc.ServingControlError) as refused:
            sc.ServingControlClient(server.control_url, TOKEN).status()
        assert refused.value.code is sc.ErrorCode.UNAUTHORIZED
    finally:
        token_file.write_text(TOKEN)
    assert sc.ServingControlClient(server.control_url, TOKEN).status().draft is not None

