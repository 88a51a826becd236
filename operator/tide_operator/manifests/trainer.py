"""The trainer Job of one training run, on the training pool, and the Jobs built like it.

The command line follows the trainer contract (docs/contracts/trainer-cli.md): ``python -m
tide_trainer train --shards ... --registry ... --run-id ...`` (``torchrun`` with one process per
GPU when a Job has several). The trainer uploads a candidate to ``candidates/<run id>/`` and exits
with a code the control loop reads; the operator promotes. The bootstrap Job (``init``) and the
draft pool's recall evaluation Job (``recall``) are trainer Jobs with another subcommand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tide_contracts.recall import POOLED_VERSION
from tide_operator.api.spec import TideDeploymentSpec
from tide_operator.catalog import GpuClass
from tide_operator.config import OperatorConfig
from tide_operator.control.placement import Placement
from tide_operator.manifests import labels, names, pod
from tide_operator.manifests.merge import merge_override

CONTAINER_NAME = "trainer"
REQUIRE_GPU_ENV = "TIDE_TRAINER_REQUIRE_GPU"  # trainer contract: "1" = exit 8 when no GPU is visible
WORK_VOLUME = "work"


def trainer_args(
    td_name: str,
    namespace: str,
    spec: TideDeploymentSpec,
    run_id: str,
    config: OperatorConfig,
    parent_draft: str | None,
) -> list[str]:
    """Flags of ``tide_trainer train``: where the shards are, what to start from, where to upload."""
    storage = spec.storage.s3
    args = [
        "--shards",
        pod.s3_uri(td_name, namespace, storage, "captures"),
        # The shards this run claimed (the operator writes the claim before the Job): exactly these are read.
        "--shard-claim",
        pod.s3_uri(td_name, namespace, storage, "claims", f"{run_id}.json"),
        "--target-revision",
        spec.target.revision,
        "--registry",
        pod.s3_uri(td_name, namespace, storage),
        "--run-id",
        run_id,
        "--speculative-tokens",
        str(spec.draft.num_speculative_tokens),
        "--work-dir",
        work_dir(td_name, namespace, run_id, config),
    ]
    parent = parent_draft or spec.draft.initial
    # Without any draft yet, the trainer starts a fresh one from the target's widths and embeddings.
    args += ["--parent-draft", parent] if parent else ["--target-model", spec.target.model]
    return args + list(config.trainer.extra_args)


def work_dir(td_name: str, namespace: str, run_id: str, config: OperatorConfig) -> str:
    """The trainer's work dir (operator config trainer.workDir with its placeholders filled)."""
    path = config.trainer.work_dir
    for placeholder, value in (("{namespace}", namespace), ("{name}", td_name), ("{run_id}", run_id)):
        path = path.replace(placeholder, value)
    return path


def gpu_requirement_env(config: OperatorConfig) -> dict[str, str]:
    """The Job asks for GPUs: the trainer exits 8 if torch sees none, unless the pool is CPU-only
    (operator config trainer.cpuOnly), where it trains on CPU (docs/contracts/trainer-cli.md)."""
    return {"name": REQUIRE_GPU_ENV, "value": "0" if config.trainer.cpu_only else "1"}


def _command(gpus: int, config: OperatorConfig) -> list[str]:
    if gpus == 1:
        return list(config.trainer.command)
    return [part.replace("{gpus}", str(gpus)) for part in config.trainer.distributed_command]


def _container(
    spec: TideDeploymentSpec, args: list[str], gpu_class: GpuClass, config: OperatorConfig, work: str, gpus: int
) -> dict[str, Any]:
    return {
        "name": CONTAINER_NAME,
        "image": spec.training.image or config.trainer.image_for(gpu_class.vendor),
        "command": _command(gpus, config),
        "args": args,
        "env": [pod.field_env("TIDE_POD_NAME", "metadata.name"), gpu_requirement_env(config), *pod.storage_env(spec)],
        "resources": pod.gpu_resources(spec.training, gpu_class, gpus),
        "volumeMounts": [
            {"name": pod.SHM_VOLUME, "mountPath": pod.SHM_MOUNT_PATH},
            {"name": WORK_VOLUME, "mountPath": work},
        ] + ([{"name": pod.SCRATCH_VOLUME, "mountPath": pod.SCRATCH_MOUNT_PATH}]
             if config.trainer.read_only_root_filesystem else []),
    }


def _volumes(config: OperatorConfig) -> list[dict[str, Any]]:
    volumes = [pod.shm_volume(config.serving.shm_size), {"name": WORK_VOLUME, "emptyDir": {}}]
    return volumes + ([pod.scratch_volume()] if config.trainer.read_only_root_filesystem else [])


def build_trainer_job(
    td_name: str,
    namespace: str,
    spec: TideDeploymentSpec,
    placement: Placement,
    *,
    run_id: str,
    operator_config: OperatorConfig,
    parent_draft: str | None = None,
    deadline_s: int | None = None,
    gpus: int | None = None,
) -> dict[str, Any]:
    """A Job named ``<td>-train-<run id>`` (deterministic: a restart finds it instead of duplicating).

    ``run_id`` must match the trainer's ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``. ``parent_draft`` is the
    served draft to warm-start from (default: spec.draft.initial; none: a fresh draft).
    backoffLimit 0: a failed run is a decision for the control loop (backoff, maxFailures), not a retry.
    ``deadline_s`` becomes activeDeadlineSeconds (spec.control.training.timeout or its default): a
    hung trainer fails at it, and its claim on the capture shards ends with it. ``gpus``: the GPUs
    it holds (default spec.training.gpusPerJob; the one-process Jobs, init and recall, hold one).
    """
    gpu_class = placement.training.gpu_class
    if gpu_class is None:
        raise ValueError(f"no training GPU class chosen: {placement.training.message}")
    args = trainer_args(td_name, namespace, spec, run_id, operator_config, parent_draft)
    template = {
        "metadata": {"labels": {**labels.trainer_labels(td_name, run_id), labels.GPU_CLASS_LABEL: gpu_class.name}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [_container(spec, args, gpu_class, operator_config,
                                      work_dir(td_name, namespace, run_id, operator_config),
                                      gpus or spec.training.gpus_per_job)],
            "volumes": _volumes(operator_config),
            **pod.scheduling_fields(spec.training, placement.training),
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.trainer_job_name(td_name, run_id),
            "namespace": namespace,
            "labels": labels.trainer_labels(td_name, run_id),
        },
        "spec": {
            "backoffLimit": 0,
            **({"activeDeadlineSeconds": int(deadline_s)} if deadline_s else {}),
            "template": pod.restricted(merge_override(template, spec.training.pod_template_override or {}),
                                       operator_config.trainer.read_only_root_filesystem),
        },
    }


# ---- the bootstrap head (`tide_trainer init`) of a deployment without spec.draft.initial ----------
BOOTSTRAP_RUN = "bootstrap"  # the training-run label and work-dir {run_id} of the init Job
BOOTSTRAP_RETRIES = 2  # the Job's backoffLimit: three attempts, then BootstrapFailed until the Job is deleted
BOOTSTRAP_DEADLINE_S = 3600  # reads the target's weights once (embedding, final norm, LM head)


def bootstrap_location(td_name: str, namespace: str, spec: TideDeploymentSpec) -> str:
    """``<registry>/bootstrap/<key of the target revision>``: never under drafts/, never a vN."""
    return pod.s3_uri(td_name, namespace, spec.storage.s3, "bootstrap", names.bootstrap_key(spec.target.revision))


def init_command(config: OperatorConfig) -> list[str]:
    """The trainer's command with ``init`` for its ``train`` subcommand (one process: no torchrun)."""
    return subcommand(config, "init")


def subcommand(config: OperatorConfig, name: str) -> list[str]:
    """The trainer's one-process command with ``name`` for its ``train`` subcommand."""
    command = list(config.trainer.command)
    if not command or command[-1] != "train":
        raise ValueError(f"operator config trainer.command {command} must end with the subcommand 'train' "
                         f"(the bootstrap and evaluation Jobs run the same command with 'init' and 'recall')")
    return [*command[:-1], name]


def _relabel(job: dict[str, Any], job_kind: str) -> None:
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        meta["labels"][labels.JOB_KIND_LABEL] = job_kind


def _trainer_container(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER_NAME)


def build_bootstrap_job(td_name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
                        operator_config: OperatorConfig) -> dict[str, Any]:
    """The init Job: a trainer Job (same pool, image, env, pod security) running ``tide_trainer init``."""
    job = build_trainer_job(td_name, namespace, spec, placement, run_id=BOOTSTRAP_RUN,
                            operator_config=operator_config, deadline_s=BOOTSTRAP_DEADLINE_S, gpus=1)
    job["metadata"]["name"] = names.bootstrap_job_name(td_name, spec.target.revision)
    job["spec"]["backoffLimit"] = BOOTSTRAP_RETRIES
    _relabel(job, labels.JOB_KIND_BOOTSTRAP)
    container = _trainer_container(job)
    container["command"] = init_command(operator_config)
    container["args"] = ["--target-model", spec.target.model, "--target-revision", spec.target.revision,
                         "--output", bootstrap_location(td_name, namespace, spec),
                         "--speculative-tokens", str(spec.draft.num_speculative_tokens),
                         "--work-dir", work_dir(td_name, namespace, BOOTSTRAP_RUN, operator_config)]
    return job


# ---- the draft pool's recall evaluation (`tide_trainer recall`, issue 16) -----------------------------
EVALUATION_DEADLINE_S = 3600  # scores a bounded number of tokens (the trainer's --max-eval-tokens) per draft
_POOLED_VERSION = re.compile(POOLED_VERSION)


def evaluation_args(td_name: str, namespace: str, spec: TideDeploymentSpec, run_id: str, config: OperatorConfig,
                    served_version: str | None, pooled_versions: Sequence[str],
                    captured_since: float | None) -> list[str]:
    """Flags of ``tide_trainer recall``: training's claim, registry and K, then each draft as VERSION=SOURCE.

    Sources are never taken from a caller: ``drafts/vN`` under the registry prefix, or spec.draft.initial
    (validated by the spec) for ``initial``. Training's extra flags are left out (recall refuses them).
    """
    _check_versions(served_version, pooled_versions)
    storage = spec.storage.s3
    args = ["--shards", pod.s3_uri(td_name, namespace, storage, "captures"),
            "--shard-claim", pod.s3_uri(td_name, namespace, storage, "claims", f"{run_id}.json"),
            "--target-revision", spec.target.revision, "--registry", pod.s3_uri(td_name, namespace, storage),
            "--run-id", run_id, "--speculative-tokens", str(spec.draft.num_speculative_tokens),
            "--work-dir", work_dir(td_name, namespace, run_id, config)]
    if captured_since is not None:
        args += ["--captured-since", repr(float(captured_since))]
    if served_version is not None:
        args += ["--served-draft", _draft_reference(td_name, namespace, spec, served_version)]
    for version in pooled_versions:
        args += ["--pooled-drafts", _draft_reference(td_name, namespace, spec, version)]
    return args


def _check_versions(served_version: str | None, pooled_versions: Sequence[str]) -> None:
    named = [*pooled_versions, *([served_version] if served_version is not None else [])]
    for version in named:
        if not _POOLED_VERSION.fullmatch(version):
            raise ValueError(f"draft version {version!r} is not a pool name ({POOLED_VERSION})")
    if not pooled_versions:
        raise ValueError("recall evaluation: no pooled draft to score")
    if len(set(named)) != len(named):
        raise ValueError(f"recall evaluation: a draft version is named twice in {named!r} "
                         "(each pooled draft once, never the served one)")


def _draft_reference(td_name: str, namespace: str, spec: TideDeploymentSpec, version: str) -> str:
    if version != "initial":
        return f"{version}={pod.s3_uri(td_name, namespace, spec.storage.s3, 'drafts', version)}"
    if spec.draft.initial is None:
        raise ValueError("draft version 'initial' names spec.draft.initial, which this deployment does not set")
    return f"initial={spec.draft.initial}"


def build_evaluation_job(td_name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement, *,
                         run_id: str, operator_config: OperatorConfig, served_version: str | None,
                         pooled_versions: Sequence[str], captured_since: float | None = None,
                         deadline_s: int = EVALUATION_DEADLINE_S) -> dict[str, Any]:
    """The recall evaluation Job ``<td>-eval-<run id>``: a trainer Job (pool, image, resources, S3 and
    encryption env, pod security, podTemplateOverride) labelled ``job-kind: evaluation``, running
    ``tide_trainer recall`` in one process. It reads the shards claimed under ``run_id`` (the operator
    writes the claim first, as for training) and writes only ``candidates/<run id>/recall.json``.

    ``served_version``: the served draft (None: nothing served); ``pooled_versions``: ``initial`` or
    ``vN`` each, never the served one. A name outside the pool's pattern is a ValueError naming it.
    """
    args = evaluation_args(td_name, namespace, spec, run_id, operator_config, served_version, pooled_versions,
                           captured_since)
    # One process scores every pooled draft: one GPU, whatever gpusPerJob a training run takes.
    job = build_trainer_job(td_name, namespace, spec, placement, run_id=run_id, operator_config=operator_config,
                            deadline_s=deadline_s, gpus=1)
    job["metadata"]["name"] = names.evaluation_job_name(td_name, run_id)
    _relabel(job, labels.JOB_KIND_EVALUATION)
    container = _trainer_container(job)
    container["command"] = subcommand(operator_config, "recall")
    container["args"] = args
    return job
