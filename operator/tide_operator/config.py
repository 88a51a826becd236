"""Operator configuration: defaults the TideDeployment spec may leave out, and the GPU catalog.

Loaded from the chart's values (camelCase keys) or built in Python (snake_case); every field has a
default so an empty config works.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from tide_contracts import versions
from tide_contracts.draft_copy import MAX_COPY_BYTES, MIN_PART_BYTES
from tide_contracts.serving_control import DEFAULT_CONTROL_PORT
from tide_operator.catalog import DEFAULT_CATALOG, ConfigError, GpuCatalog, GpuClass, Vendor, load_catalog


class _ConfigModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True)


class ServingConfig(_ConfigModel):
    """The vLLM server image (vLLM plus the tide_serving plugin) and how to start it.

    Class names must match what the serving plugin ships (its contract owns them).
    """

    image: str = versions.image(versions.SERVING_REPOSITORY)
    """For NVIDIA classes and any vendor without a vendorImages entry: vllm/vllm-openai at the
    tested vLLM with tide_serving installed (images/serving.Dockerfile, tide_contracts/versions.py)."""
    vendor_images: dict[Vendor, str] = Field(
        default_factory=lambda: {Vendor.AMD: versions.image(versions.SERVING_ROCM_REPOSITORY)})
    """The image per GPU vendor of the chosen inference class (AMD: the ROCm build,
    images/serving-rocm.Dockerfile); a spec's inference.image wins over both."""
    command: tuple[str, ...] = ("python", "-m", "vllm.entrypoints.openai.api_server")
    worker_extension_cls: str | None = "tide_serving.worker_extension.TideWorkerExtension"
    """Adds draft hot swap and hidden-state capture to vLLM's workers."""
    scheduler_cls: str | None = "tide_serving.scheduler.SpeculationSwitchScheduler"
    """Switches speculation without a restart (runtime_control in the serving contract)."""
    vllm_plugins: str | None = "tide_control"
    """VLLM_PLUGINS: loads the plugin's control routes (vLLM endpoint plugin)."""
    shm_size: str = "16Gi"
    """Size of /dev/shm (tensor parallel workers exchange tensors through it)."""
    read_only_root_filesystem: bool = False
    """vLLM, Triton and torch.compile write caches under HOME and /tmp: off unless the image moves them."""
    control_port: int = Field(default=DEFAULT_CONTROL_PORT, ge=1, le=65535)
    """The plugin's control routes listen here, apart from the API port (the chart's NetworkPolicy
    admits only the operator to it); a spec whose inference.port is this port is refused."""
    token_rotation_grace_seconds: int = Field(default=300, ge=0)
    """After a rotation the previous control token is still accepted this long: kubelets deliver a
    changed Secret volume within their sync period plus cache TTL (about two minutes by default)."""

    shutdown_timeout_seconds: int = Field(default=20, ge=0, le=3600)
    """vLLM's --shutdown-timeout: on SIGTERM (a scale-down, a rollout, a serving group retiring) requests
    in flight get this long to finish; vLLM's own default, 0, aborts them. 0 leaves the flag out."""
    pre_stop_sleep_seconds: int = Field(default=5, ge=0, le=300)
    """A preStop sleep before SIGTERM, so endpoints and gateways stop sending to a deleted pod before it
    stops listening (the `sleep` binary of the image). 0: no hook."""

    def image_for(self, vendor: Vendor) -> str:
        """The image for a GPU class of ``vendor``."""
        return self.vendor_images.get(vendor, self.image)

    @property
    def termination_grace_seconds(self) -> int:
        """The pod's grace period: the preStop sleep, the drain, and a margin to exit (Kubernetes' 30 at least)."""
        return max(30, self.pre_stop_sleep_seconds + self.shutdown_timeout_seconds + 10)


class TrainerConfig(_ConfigModel):
    """The trainer image and launchers (docs/contracts/trainer-cli.md)."""

    image: str = versions.image(versions.TRAINER_REPOSITORY)
    """For NVIDIA classes and any vendor without a vendorImages entry (CUDA PyTorch)."""
    vendor_images: dict[Vendor, str] = Field(
        default_factory=lambda: {Vendor.AMD: versions.image(versions.TRAINER_ROCM_REPOSITORY)})
    """The image per GPU vendor of the chosen training class (AMD: ROCm PyTorch,
    images/trainer-rocm.Dockerfile); a spec's training.image wins over both."""
    cpu_only: bool = False
    """The training pool has no real GPUs (the local plane, kind): the trainer then trains on CPU
    instead of exiting 8 (no GPU visible) when torch sees none (docs/contracts/trainer-cli.md)."""
    command: tuple[str, ...] = ("python", "-m", "tide_trainer", "train")
    distributed_command: tuple[str, ...] = ("torchrun", "--nproc-per-node={gpus}", "-m", "tide_trainer", "train")
    """Used when a Job has more than one GPU; ``{gpus}`` becomes training.gpusPerJob."""
    work_dir: str = "/var/tide/train"
    """Checkpoints, exported candidate and report (an emptyDir mounted there). ``{namespace}``,
    ``{name}`` (the TideDeployment) and ``{run_id}`` are replaced, for runtimes where the path is
    shared between Jobs (the local plane runs pods as processes, without volumes): the trainer
    resumes from a checkpoint it finds in its work dir."""
    read_only_root_filesystem: bool = True
    """The trainer writes only its work dir and /tmp (torchrun's logs); both are emptyDirs then."""
    samples_per_second: float = Field(default=1.0, gt=0, le=1_000_000)
    """Assumed training throughput (captured requests per second of a run) until a run has measured
    one (its eval.json); prices the default trainer deadline (spec.control.training.timeout)."""
    window_shards: int = Field(default=4096, ge=1, le=1_000_000)
    """Newest shards one run claims and reads (the trainer's ``--window-shards``)."""
    extra_args: tuple[str, ...] = ()
    """Appended to the trainer's flags (docs/contracts/trainer-cli.md), e.g. ``[--max-steps, "500",
    --batch-size, "16"]`` to size training runs; must not repeat a flag the operator sets (shards,
    target revision, registry, run id, speculative tokens, work dir, parent draft / target model)."""

    def image_for(self, vendor: Vendor) -> str:
        """The image for a GPU class of ``vendor``."""
        return self.vendor_images.get(vendor, self.image)


class PodPolicyConfig(_ConfigModel):
    """What a TideDeployment may ask of the pods the operator runs for it (docs/security.md).

    Allowlists, not denylists: a TideDeployment never grants more than its author could create.
    """

    allowed_image_prefixes: tuple[str, ...] | None = None
    """Prefixes a spec's ``image`` must start with (one ending in ``/`` admits everything under it,
    any other admits that repository with any tag or digest); default: the repositories of
    serving's and trainer's image and vendorImages."""
    allowed_toleration_keys: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")
    """Taint keys pods may tolerate, besides the resource names of the GPU classes."""
    allowed_priority_class_names: tuple[str, ...] = ()
    """PriorityClasses a spec may name; none by default (a priority class can preempt other teams' pods)."""
    operator_service_account: str | None = None
    """The operator's own ServiceAccount name (the chart sets it): no pod of a TideDeployment runs as it."""


class StorageConfig(_ConfigModel):
    """Which S3 a TideDeployment may use (docs/security.md, storage tenancy).

    Without ``spec.storage.s3.credentialsSecret`` the operator and the pods act under ambient
    identities (the operator's IRSA or instance role): such a deployment may use only ``buckets``,
    only ``endpoint`` and only the prefix ``<namespace>/<name>/``. With its own credentials a
    deployment chooses bucket and prefix, but its endpoint must still be allowlisted here.
    """

    buckets: tuple[str, ...] = ()
    """Buckets usable under the operator's identity; none by default (every spec brings credentials)."""
    endpoint: str | None = Field(default=None, pattern=r"^https?://\S+$")
    """S3-compatible endpoint of those buckets, and the default of a spec without one; null: AWS."""
    allowed_endpoints: tuple[str, ...] = ()
    """Other endpoints a spec with its own credentialsSecret may name, as ``scheme://host[:port]``
    (an entry without a port admits every port of that host)."""


class PromotionConfig(_ConfigModel):
    """How the operator copies a verified candidate to drafts/vN/ (docs/contracts/draft-registry.md)."""

    multipart_copy_threshold_mib: int = Field(default=MAX_COPY_BYTES // 2**20, ge=MIN_PART_BYTES // 2**20,
                                              le=MAX_COPY_BYTES // 2**20)
    """Files up to this size are copied with one CopyObject, larger ones with a multipart copy in
    parts of this size; S3 bounds it to [5 MiB, 5 GiB] (lower it only to exercise the multipart path)."""

    @property
    def multipart_copy_threshold_bytes(self) -> int:
        return self.multipart_copy_threshold_mib * 2**20


class PrometheusConfig(_ConfigModel):
    """How the operator connects to Prometheus, and which a TideDeployment may name (docs/security.md)."""

    allowed_urls: tuple[str, ...] = ()
    """URL prefixes ``spec.prometheus.url`` must lie under (same scheme, host and port, path at or
    below the prefix's); empty: a spec may name only prometheusUrl itself."""
    ca_file: str | None = None
    """PEM bundle that verifies prometheusUrl's certificate; default: the system's CAs."""
    insecure_skip_tls_verify: bool = False
    """Do not verify prometheusUrl's certificate (test setups only; never for a spec's URL)."""
    username_file: str | None = None
    """Basic auth for prometheusUrl: files holding the user name and password (a mounted Secret)."""
    password_file: str | None = None
    bearer_token_file: str | None = None
    """Bearer token for prometheusUrl (a mounted Secret); re-read every pass, so rotation needs no restart."""
    deployment_label: str = Field(default="label_tide_dev_deployment", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
    """Label naming a series' TideDeployment (the chart's PodMonitor relabels tide.dev/deployment to it)."""

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusConfig:
        if (self.username_file is None) != (self.password_file is None):
            raise ValueError("usernameFile and passwordFile go together")
        if self.bearer_token_file and self.username_file:
            raise ValueError("bearerTokenFile or usernameFile/passwordFile, not both")
        for url in self.allowed_urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.username:
                raise ValueError(f"allowedUrls: {url!r} is not an http(s) URL prefix without userinfo or query")
        return self


class LeaderElectionConfig(_ConfigModel):
    """One active operator among replicas, through a coordination.k8s.io/v1 Lease (docs/operating.md).

    client-go's defaults and rules: the leader renews every retry period and exits when it could not
    renew for the renew deadline; a follower takes over a lease nobody renewed for its duration.
    """

    enabled: bool = True
    """Off only for a single local process (``--no-leader-election`` does the same)."""
    lease_name: str = Field(default="tide-operator", pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
    """The chart sets its full name, so two releases in one namespace hold two leases."""
    lease_namespace: str | None = Field(default=None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    """Default: the operator pod's namespace (POD_NAMESPACE, from the downward API)."""
    lease_duration_seconds: int = Field(default=15, ge=2, le=3600)
    """How long a follower waits after the last renewal it saw: the most a failover costs."""
    renew_deadline_seconds: float = Field(default=10.0, gt=0, le=3600)
    """The leader exits (and restarts as a follower) when it could not renew for this long."""
    retry_period_seconds: float = Field(default=2.0, gt=0, le=600)
    """Between attempts: the leader's renewals and a follower's looks at the lease."""

    @model_validator(mode="after")
    def _nested(self) -> LeaderElectionConfig:
        if not self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError("retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds, as client-go requires")
        return self


class PodCallsConfig(_ConfigModel):
    """How a pass calls its serving pods' control routes (fleet.py): in parallel, each call with a deadline."""

    parallelism: int = Field(default=8, ge=1, le=256)
    """Calls one pass runs at once (a thread pool per fan-out)."""
    status_deadline_seconds: float = Field(default=5.0, gt=0, le=600)
    """A status read: the plugin answers from memory; a pod silent this long counts as not answering."""
    switch_deadline_seconds: float = Field(default=15.0, gt=0, le=600)
    """Speculation or capture on/off: a file write or one engine RPC on the pod."""
    draft_load_deadline_seconds: float = Field(default=120.0, gt=0, le=3600)
    """A draft load answers only after the pod downloaded the draft from S3, verified every file's sha256
    and swapped it in (a pause of seconds): an EAGLE-3 head of an 8B target is about 1 GiB, so 120 s
    allows about 10 MiB/s. A pod still loading when it passes keeps loading; the next pass sees its
    version in its status and does not load it again."""


class LendingConfig(_ConfigModel):
    """Lending the training pool to serving (training.lendWhenIdle, docs/fleet.md)."""

    drain_seconds: float = Field(default=60.0, gt=0, le=3600)
    """The drain's bound: lent pods out of service get this long for their requests in flight."""
    startup_seconds: float = Field(default=240.0, gt=0, le=7200)
    """A lent replica from scheduling to serving (model load): nothing is lent for a shorter window."""


class KubernetesConfig(_ConfigModel):
    """The operator's own Kubernetes API calls (cluster.py); Kopf's watches keep their own timeouts."""

    connect_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    read_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """Per request: an API server that stops answering fails the pass, which is retried, instead of
    holding one of Kopf's worker threads without end."""
    secret_max_age_seconds: float = Field(default=300.0, ge=0, le=86400)
    """How long a credentials Secret a spec references is used without reading it again (secret_cache.py);
    a 401/403 from S3 or Prometheus re-reads it at once. 0: read on every pass."""


class OperatorConfig(_ConfigModel):
    serving: ServingConfig = Field(default_factory=ServingConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    pod_policy: PodPolicyConfig = Field(default_factory=PodPolicyConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    prometheus_url: str = "http://prometheus-operated.monitoring:9090"
    prometheus: PrometheusConfig = Field(default_factory=PrometheusConfig)
    prometheus_window_seconds: float = Field(default=60.0, gt=0, le=3600)
    """Rate window of the acceptance and throughput queries; keep it >= 4 scrape intervals."""
    prometheus_interval_seconds: float = Field(default=10.0, gt=0, le=3600)
    """How long one snapshot of every deployment's metrics answers the handlers."""
    prometheus_settle_seconds: float = Field(default=5.0, ge=0, le=300)
    """Queries are evaluated this long before now. A snapshot is several queries whose ratios are taken
    (accepted tokens over drafts); at now, a scrape still being ingested lands between two of them, and a
    whole-loop run read position-0 acceptance 0.18 against a steady 0.45, which cancelled a training
    run as a workload shift. Keep it above Prometheus' scrape duration."""
    resync_interval_seconds: float = Field(default=30.0, gt=0, le=3600)
    """How often every TideDeployment is re-checked against its children (drift repair, status)."""
    capture_prune_interval_seconds: float = Field(default=60.0, gt=0, le=3600)
    """How often each TideDeployment's capture buffer is pruned to its retention and caps, whatever
    Prometheus or the lifecycle are doing (docs/security.md: the retention bound)."""
    delete_attempts: int = Field(default=5, ge=1, le=100)
    """Failed attempts at deleting a TideDeployment's S3 data before its finalizer gives up with a
    Warning Event (so a namespace never hangs on an unreachable bucket)."""
    gpu_classes: tuple[GpuClass, ...] = DEFAULT_CATALOG.gpu_classes
    promotion: PromotionConfig = Field(default_factory=PromotionConfig)
    leader_election: LeaderElectionConfig = Field(default_factory=LeaderElectionConfig)
    pod_calls: PodCallsConfig = Field(default_factory=PodCallsConfig)
    kubernetes: KubernetesConfig = Field(default_factory=KubernetesConfig)
    lending: LendingConfig = Field(default_factory=LendingConfig)

    @property
    def catalog(self) -> GpuCatalog:
        return GpuCatalog(gpu_classes=self.gpu_classes)


def load_operator_config(raw: Any) -> OperatorConfig:
    """Config from a dict (chart values); raises ConfigError naming the field."""
    try:
        config = OperatorConfig.model_validate(raw or {})
    except ValidationError as err:
        first = err.errors()[0]
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise ConfigError(path, first["msg"]) from None
    load_catalog({"gpuClasses": [gpu_class.model_dump() for gpu_class in config.gpu_classes]})
    return config
