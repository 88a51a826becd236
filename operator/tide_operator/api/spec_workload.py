"""What runs where: the target model, its draft, the inference and training pools, storage."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints

from tide_operator.api.base import ApiModel, DnsLabel, DnsSubdomain, GpuClassName, ModelLocation, cel_validations
from tide_operator.api.extra_args import cel_rule as extra_args_cel_rule
from tide_operator.api.spec_control import CostProfileSpec

# Strings are never empty: the v1.20 API server validates "" in a custom resource as null.
LabelKey = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9./_-]+$")]
QuantityMap = dict[str, int | str]


class DraftMethod(StrEnum):
    EAGLE3 = "eagle3"
    EAGLE = "eagle"  # reserved: the trainer and the serving plugin handle EAGLE-3 only for now


SUPPORTED_DRAFT_METHODS: tuple[DraftMethod, ...] = (DraftMethod.EAGLE3,)


class TargetSpec(ApiModel):
    """The target model that vLLM serves; drafts are pinned to its revision and tokenizer."""

    model: ModelLocation
    """s3://bucket/prefix, a Hugging Face model id, or a path inside the image."""
    revision: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._/-]+$")]
    """Revision of the target weights (a commit for Hugging Face ids, a label for s3:// and paths)."""
    tokenizer: ModelLocation | None = None
    """Tokenizer location; defaults to the model."""
    served_model_name: Annotated[str, StringConstraints(max_length=128, pattern=r"^[A-Za-z0-9._:/-]+$")] | None = None
    """Model name clients send in requests; defaults to the TideDeployment's name."""
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """GPUs one vLLM engine shards the target across; must divide inference.gpusPerReplica."""


class DraftSpec(ApiModel):
    """The speculative draft head."""

    method: DraftMethod = Field(
        default=DraftMethod.EAGLE3, json_schema_extra={"enum": [m.value for m in SUPPORTED_DRAFT_METHODS]}
    )
    """Draft algorithm; eagle3 is the only one served and trained so far."""
    initial: ModelLocation | None = None
    """Draft to start with; without one, serve without speculation until a draft is trained."""
    num_speculative_tokens: int = Field(default=3, ge=1, le=8)
    """Tokens the draft proposes per step (the upper bound when adaptiveSpeculativeTokens is on)."""


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A core/v1 Toleration (GPU pools are usually tainted)."""

    key: LabelKey | None = None
    """Taint key tolerated; must be a key the operator's podPolicy allows or a GPU class's resource
    name (a toleration without a key, tolerating every taint, is refused)."""
    operator: TolerationOperator | None = None
    """Exists (any value) or Equal (the value below); Kubernetes defaults to Equal."""
    value: Annotated[str, StringConstraints(min_length=1, max_length=63)] | None = None
    """Taint value matched by Equal; leave out with Exists."""
    effect: TaintEffect | None = None
    """Taint effect tolerated (NoSchedule, PreferNoSchedule, NoExecute); omitted: every effect."""
    toleration_seconds: int | None = Field(default=None, ge=0)
    """With NoExecute: seconds the pod stays bound after the taint appears; omitted: forever."""


class ResourceOverrides(ApiModel):
    """CPU and memory for the container; the GPU count always comes from the pool's GPU class."""

    requests: QuantityMap | None = Field(default=None, max_length=16)
    """Requests by resource name (cpu: 4, memory: 32Gi); one for the pool's GPU resource is dropped."""
    limits: QuantityMap | None = Field(default=None, max_length=16)
    """Limits by resource name; the pool's GPU resource is always limited to gpusPerReplica (gpusPerJob)."""


class PodScheduling(ApiModel):
    """Production scheduling knobs shared by the inference pods and the trainer Jobs."""

    gpu_classes: tuple[GpuClassName, ...] | None = Field(
        default=None, max_length=16, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    """Allowed GPU classes from the operator's catalog; default: every class in the catalog."""
    image: Annotated[str, StringConstraints(min_length=1, max_length=512)] | None = None
    """Container image; default from the operator configuration."""
    tolerations: tuple[Toleration, ...] = Field(default=(), max_length=32)
    """Tolerations of the pods (core/v1), at most 32; keys limited by the operator's podPolicy."""
    priority_class_name: DnsSubdomain | None = None
    """PriorityClass of the pods; must be one the operator's podPolicy allows."""
    service_account_name: DnsSubdomain | None = None
    """Service account of the pods (cloud IAM for S3 instead of a credentials Secret)."""
    resources: ResourceOverrides | None = None
    pod_template_override: dict[str, Any] | None = None
    """Merged last into the pod template (maps merge, lists of named items merge by name)."""


class DisruptionSpec(ApiModel):
    """The PodDisruptionBudget of the vLLM pods: how many a voluntary eviction (a node drain, an
    autoscaler's scale-down) may take at once. Involuntary losses (a node failure) are not covered."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "!has(self.maxUnavailable) || !has(self.minAvailable)",
             "message": "set at most one of maxUnavailable and minAvailable"},
        )
    )

    enabled: bool = True
    """false: no PodDisruptionBudget (one the operator made earlier is deleted)."""
    max_unavailable: int | str | None = None
    """Pods a drain may evict at once: a count (0-64) or a percentage ("25%"); default 1."""
    min_available: int | str | None = None
    """Pods that must stay up through a drain, instead: a count (0-64) or a percentage ("75%")."""


class GatewayRef(ApiModel):
    """The Gateway API Gateway an HTTPRoute of the vLLM pods attaches to (its parentRef)."""

    name: DnsSubdomain
    """Name of the Gateway."""
    namespace: DnsLabel | None = None
    """Its namespace; default: the TideDeployment's (another one must allow the route: allowedRoutes)."""
    section_name: Annotated[str, StringConstraints(min_length=1, max_length=253,
                                                   pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")] | None = None
    """One listener of the Gateway; default: every listener that accepts the route."""


class ServingGroup(ApiModel):
    """One GPU class that serves beside the others (inference.servingGroups): its own Deployment."""

    model_config = ConfigDict(
        json_schema_extra=cel_validations(
            {"rule": "!has(self.maxReplicas) || self.maxReplicas >= self.minReplicas",
             "message": "maxReplicas must be at least minReplicas"},
        )
    )

    gpu_class: GpuClassName
    """A GPU class of the operator's catalog (and of inference.gpuClasses where that is set)."""
    min_replicas: int = Field(default=0, ge=0, le=64)
    """Replicas this class always runs while inference.replicas allows (fastest class first)."""
    max_replicas: int | None = Field(default=None, ge=0, le=64)
    """Replicas this class runs at most; default: no bound of its own."""
    gpus_per_replica: int | None = Field(default=None, ge=1, le=16)
    """GPUs per replica of this class; default: inference.gpusPerReplica."""
    cost_profile: CostProfileSpec | None = None
    """This class's c(b) and beta(b) (its own draft and verify costs): its pods get their own speculative
    tokens per batch size from it; default: control.costProfile. Like it, a ConfigMap reference or points."""


class InferenceSpec(PodScheduling):
    """The vLLM servers on the inference pool."""

    replicas: int = Field(default=1, ge=0, le=64)
    """vLLM replicas; owned by the scale subresource when an autoscaler is used."""
    gpus_per_replica: int = Field(default=1, ge=1, le=16)
    """GPUs per replica; a replica must fit on one node."""
    extra_args: tuple[Annotated[str, StringConstraints(min_length=1, max_length=512)], ...] = Field(
        default=(),
        max_length=64,
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": extra_args_cel_rule(), "message": "extraArgs may not set a flag the operator owns"}
            ]
        },
    )
    """Extra vLLM arguments; flags the operator sets itself (--model, -sc, --port...) are refused."""
    port: int = Field(default=8000, ge=1024, le=65535)
    """Port of the OpenAI API, /health, /metrics and the serving plugin's control routes."""
    disruption: DisruptionSpec = Field(default_factory=DisruptionSpec)
    """The PodDisruptionBudget of the vLLM pods (maxUnavailable 1 by default)."""
    gateway: GatewayRef | None = None
    """Route requests by capacity: a Service per GPU class serving and an HTTPRoute (Gateway API, where its
    CRDs are installed) attached to this Gateway, each class weighted by its ready replicas' modelled
    throughput. Without it the one Service spreads requests evenly per pod, and lending
    (training.lendWhenIdle) skips a training class slower per replica than the serving one."""
    serving_groups: tuple[ServingGroup, ...] = Field(
        default=(), max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["gpuClass"]},
    )
    """Serve on several GPU classes at once: a Deployment per class (<name>-vllm-<class>), replicas (the
    total) split across them within each class's min/max, the fastest class with room first. Empty: one
    Deployment (<name>-vllm) on the one class placement chooses."""


class TrainingSpec(PodScheduling):
    """The trainer Jobs on the training pool."""

    gpus_per_job: int = Field(default=1, ge=1, le=16)
    """GPUs of the training pool's class each trainer Job requests; a Job must fit on one node."""
    max_concurrent_jobs: int = Field(default=1, ge=1, le=8)
    """Reserved: the operator runs one trainer Job at a time per TideDeployment whatever this says."""
    lend_when_idle: bool = False
    """Lend the training pool's idle GPUs to serving: while no trainer Job needs them the operator runs
    extra vLLM replicas there (the <name>-lent Deployment) where that raises what the fleet serves, and
    drains them (out of service, in-flight requests finish, bounded) before a Job starts."""


# What botocore accepts as an endpoint host: DNS labels of letters, digits and inner dashes (no
# underscore), a port up to 65535 (a path parses; storage tenancy refuses it).
_HOST_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"
_PORT = r"([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
S3_ENDPOINT_PATTERN = rf"^https?://{_HOST_LABEL}(\.{_HOST_LABEL})*(:{_PORT})?(/[^\s?#]*)?$"
# botocore's region check: a host label that is not all digits.
S3_REGION_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"


class S3Storage(ApiModel):
    """S3 (or S3-compatible) storage of captures and drafts."""

    bucket: Annotated[str, StringConstraints(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")]
    """Bucket name; without credentialsSecret it must be one the operator configuration lends."""
    # No empty-string defaults: the v1.20 API server reads them as null and rejects the CRD.
    prefix: (
        Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[A-Za-z0-9!_.*'()/-]+$")] | None
    ) = None
    """Key prefix of this deployment's captures/ and drafts/; default: <namespace>/<name>."""
    endpoint: Annotated[str, StringConstraints(max_length=262, pattern=S3_ENDPOINT_PATTERN)] | None = None
    """Endpoint of an S3-compatible store (``http(s)://host[:port]``, a DNS name or IPv4 address: the
    S3 client refuses host names with underscores); empty for AWS."""
    region: Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=S3_REGION_PATTERN)] | None = None
    """Region (us-east-1, auto): lowercase words joined by single dashes, starting with a letter."""
    credentials_secret: DnsSubdomain | None = None
    """Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; omit to use the service account."""
    delete_artifacts_on_delete: bool = False
    """Delete captures and drafts when the TideDeployment is deleted (drafts are kept by default)."""
    delete_captures_on_delete: bool = True
    """Delete the captured hidden states (tenant data) when the TideDeployment is deleted."""


class StorageSpec(ApiModel):
    """Where captures (hidden-state shards) and drafts are stored."""

    s3: S3Storage


# A label name goes into PromQL: the pattern is Prometheus' own, so nothing else can.
PrometheusLabelName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$")
]


class PrometheusSpec(ApiModel):
    """The Prometheus that scrapes the vLLM pods; the control loop reads acceptance and load from it."""

    url: Annotated[str, StringConstraints(max_length=512, pattern=r"^https?://\S+$")] | None = None
    """Prometheus that scrapes the vLLM pods; default from the operator configuration. Another URL
    must lie under the operator configuration's prometheus.allowedUrls."""
    credentials_secret: DnsSubdomain | None = None
    """Secret in this namespace with ``username`` and ``password`` (basic auth) or ``token`` (bearer),
    and optionally ``ca.crt`` (PEM) to verify the server; the only credentials sent to a spec url."""
    deployment_label: PrometheusLabelName | None = None
    """Label naming the TideDeployment on the scraped vLLM series; default from the operator
    configuration (label_tide_dev_deployment, as the chart's PodMonitor relabels it)."""
