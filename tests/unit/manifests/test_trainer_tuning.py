"""Operator config trainer.extraArgs and trainer.workDir placeholders reach the trainer Job."""

from __future__ import annotations

from manifest_fixtures import placement, spec_with

from tide_operator.config import load_operator_config
from tide_operator.manifests.trainer import build_trainer_job


def _container(config):
    job = build_trainer_job("chat", "llm", spec_with(), placement(), run_id="r4", operator_config=config)
    return job["spec"]["template"]["spec"]["containers"][0]


def test_extra_args_follow_the_operators_flags():
    container = _container(load_operator_config({"trainer": {"extraArgs": ["--max-steps", "50"]}}))
    assert container["args"][-2:] == ["--max-steps", "50"]
    assert "--run-id" in container["args"][:-2]


def test_work_dir_placeholders_give_each_run_its_own_dir():
    container = _container(load_operator_config({"trainer": {"workDir": "/scratch/{namespace}/{name}/{run_id}"}}))
    args = container["args"]
    assert args[args.index("--work-dir") + 1] == "/scratch/llm/chat/r4"
    assert {"name": "work", "mountPath": "/scratch/llm/chat/r4"} in container["volumeMounts"]


def test_defaults_unchanged():
    container = _container(load_operator_config({}))
    args = container["args"]
    assert args[args.index("--work-dir") + 1] == "/var/tide/train"
    assert args[-2] in ("--parent-draft", "--target-model")
