"""spec.control.capture's server-side encryption reaches every writer's pod as TIDE_S3_SSE* (issue 13,
item 2): the vLLM pods (captures) and the trainer Jobs (candidates); nothing is set when it is off."""

from __future__ import annotations

import pytest
from manifest_fixtures import env_map, placement, spec_with

from tide_contracts.encryption import S3Encryption
from tide_operator.config import OperatorConfig
from tide_operator.manifests.pod import s3_encryption
from tide_operator.manifests.serving import build_serving_deployment
from tide_operator.manifests.trainer import build_trainer_job

KEY = "arn:aws:kms:us-east-1:1:key/a"


def _pod_envs(spec):
    serving = build_serving_deployment("chat", "llm", spec, placement(), OperatorConfig())
    trainer = build_trainer_job("chat", "llm", spec, placement(), run_id="r1", operator_config=OperatorConfig())
    return [env_map(d["spec"]["template"]["spec"]["containers"][0]) for d in (serving, trainer)]


@pytest.mark.parametrize(("capture", "expected"), [
    ({"serverSideEncryption": "AES256"}, {"TIDE_S3_SSE": "AES256"}),
    ({"serverSideEncryption": "aws:kms", "kmsKeyId": KEY}, {"TIDE_S3_SSE": "aws:kms", "TIDE_S3_SSE_KMS_KEY_ID": KEY}),
    ({"serverSideEncryption": "aws:kms"}, {"TIDE_S3_SSE": "aws:kms"}),
    ({}, {}),
])
def test_every_writer_pod_gets_the_specs_encryption(capture, expected):
    spec = spec_with(control={"capture": capture})
    for env in _pod_envs(spec):
        assert {k: v for k, v in env.items() if k.startswith("TIDE_S3_SSE")} == expected
    # The operator's own registry applies the very same settings.
    assert S3Encryption.from_env(expected) == s3_encryption(spec.control.capture)


class _Secrets:
    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}


def test_the_operators_registry_writes_with_the_same_settings():
    from tide_operator.passes.control_step import make_registry

    spec = spec_with(control={"capture": {"serverSideEncryption": "aws:kms", "kmsKeyId": KEY}})
    registry = make_registry("chat", "llm", spec, _Secrets())  # type: ignore[arg-type]
    assert registry.encryption == S3Encryption("aws:kms", KEY)
    assert registry.encryption.put_args() == {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KEY}
