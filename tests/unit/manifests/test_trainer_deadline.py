"""Trainer Jobs carry their deadline (activeDeadlineSeconds) and the claim naming the shards they read."""

from __future__ import annotations

import pytest
from manifest_fixtures import placement, spec_with

from tide_operator.config import OperatorConfig
from tide_operator.manifests.trainer import build_trainer_job


@pytest.mark.parametrize(("deadline", "expected"), [(1800, 1800), (None, None)])
def test_the_job_carries_its_deadline_and_its_claim(deadline: int | None, expected: int | None) -> None:
    job = build_trainer_job("chat", "llm", spec_with(), placement(), run_id="r4", operator_config=OperatorConfig(),
                            deadline_s=deadline)
    assert job["spec"].get("activeDeadlineSeconds") == expected
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--shard-claim") + 1].endswith("/llm/chat/claims/r4.json")
    assert args[args.index("--shards") + 1].endswith("/llm/chat/captures")
