"""The trainer Job of one training run, on the training pool.

The command line follows the trainer contract (docs/contracts/trainer-cli.md): ``python -m
tide_trainer train --shards ... --registry ... --run-id ...`` (``torchrun`` with one process per
GPU when a Job has several). The trainer uploads a candidate to ``candidates/<run id>/`` and exits
with a code the control loop reads; the operator promotes.
"""

from __future__ import annotations

from typing import Any

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


def _command(spec: TideDeploymentSpec, config: OperatorConfig) -> list[str]:
    gpus = spec.training.gpus_per_job
    if gpus == 1:
        return list(config.trainer.command)
    return [part.replace("{gpus}", str(gpus)) for part in config.trainer.distributed_command]


def _container(
    spec: TideDeploymentSpec, args: list[str], gpu_class: GpuClass, config: OperatorConfig, work: str
) -> dict[str, Any]:
    return {
        "name": CONTAINER_NAME,
        "image": spec.training.image or config.trainer.image_for(gpu_class.vendor),
        "command": _command(spec, config),
        "args": args,
        "env": [pod.field_env("TIDE_POD_NAME", "metadata.name"), gpu_requirement_env(config), *pod.storage_env(spec)],
        "resources": pod.gpu_resources(spec.training, gpu_class, spec.training.gpus_per_job),
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
) -> dict[str, Any]:
    """A Job named ``<td>-train-<run id>`` (deterministic: a restart finds it instead of duplicating).

    ``run_id`` must match the trainer's ``[A-Za-z0-9][A-Za-z0-9._-]{0,127}``. ``parent_draft`` is the
    served draft to warm-start from (default: spec.draft.initial; none: a fresh draft).
    backoffLimit 0: a failed run is a decision for the control loop (backoff, maxFailures), not a retry.
    ``deadline_s`` becomes activeDeadlineSeconds (spec.control.training.timeout or its default): a
    hung trainer fails at it, and its claim on the capture shards ends with it.
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
                                      work_dir(td_name, namespace, run_id, operator_config))],
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
    command = list(config.trainer.command)
    if not command or command[-1] != "train":
        raise ValueError(f"operator config trainer.command {command} must end with the subcommand 'train' "
                         "(the bootstrap Job runs the same command with 'init')")
    return [*command[:-1], "init"]


def build_bootstrap_job(td_name: str, namespace: str, spec: TideDeploymentSpec, placement: Placement,
                        operator_config: OperatorConfig) -> dict[str, Any]:
    """The init Job: a trainer Job (same pool, image, env, pod security) running ``tide_trainer init``."""
    job = build_trainer_job(td_name, namespace, spec, placement, run_id=BOOTSTRAP_RUN,
                            operator_config=operator_config, deadline_s=BOOTSTRAP_DEADLINE_S)
    job["metadata"]["name"] = names.bootstrap_job_name(td_name, spec.target.revision)
    job["spec"]["backoffLimit"] = BOOTSTRAP_RETRIES
    container = next(c for c in job["spec"]["template"]["spec"]["containers"] if c["name"] == CONTAINER_NAME)
    container["command"] = init_command(operator_config)
    container["args"] = ["--target-model", spec.target.model, "--target-revision", spec.target.revision,
                         "--output", bootstrap_location(td_name, namespace, spec),
                         "--speculative-tokens", str(spec.draft.num_speculative_tokens),
                         "--work-dir", work_dir(td_name, namespace, BOOTSTRAP_RUN, operator_config)]
    return job
