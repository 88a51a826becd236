"""The simulator's scenario: what each draft version accepts on each traffic domain, and the load.

    seed: 7
    default_domain: general
    default_acceptance: 0.5            # a for a (version, domain) pair the table does not list
    acceptance:                        # per-token acceptance a (TIDE's alpha) by version, then domain
      initial: {general: 0.75, korean: 0.35}
      v1: {general: 0.74, korean: 0.70}
    timeline:                          # seconds since the server started; the last phase lasts
      - {at_s: 0, domain: general}
      - {at_s: 60, domain: korean, background_running: 40}

`a` is the probability that a drafted token is accepted given the ones before it were, so
position i is accepted with probability a^(i+1): vLLM's per-position acceptance at position 0 is
a, its acceptance rate is (a + ... + a^g) / g and its mean acceptance length 1 + a + ... + a^g.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

Acceptance = float
_RUN_SUFFIX = re.compile(r"^[0-9a-f]{8}-(r[0-9]+)$")  # the operator's run id: <uid hash>-r<counter>


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Phase(_Model):
    at_s: float = Field(ge=0)
    domain: str | None = None  # traffic domain of requests that name none (None: default_domain)
    background_running: int = Field(default=0, ge=0, description="virtual requests always running")


class EngineModel(_Model):
    """Step latency: step_seconds x (1 + batch / batch_knee) x (1 + draft_cost x g while speculating)."""

    step_seconds: float = Field(default=0.01, gt=0)
    batch_knee: float = Field(default=320.0, gt=0)
    draft_cost: float = Field(default=0.1, ge=0)
    tick_seconds: float = Field(default=0.1, gt=0, description="background load and capture flush period")
    background_prompt_tokens: int = Field(default=16, ge=1)
    background_max_tokens: int = Field(default=32, ge=1)


class CaptureModel(_Model):
    """Shape of the synthetic hidden states: must fit the draft the trainer trains."""

    hidden_size: int = Field(default=64, gt=0)
    aux_layer_ids: tuple[int, int, int] = (1, 2, 3)
    vocab_size: int = Field(default=256, gt=1)
    tokenizer_hash: str = "0" * 64
    dtype: str = Field(default="bf16", pattern="^(bf16|fp16|fp32)$")
    max_rows_per_request: int = Field(default=64, ge=2)


class Scenario(_Model):
    seed: int = 0
    default_domain: str = "general"
    default_acceptance: Acceptance = Field(default=0.6, ge=0, le=1)
    acceptance: dict[str, dict[str, Acceptance]] = Field(default_factory=dict)
    noise: float = Field(default=0.0, ge=0, le=1, description="relative gaussian noise on a, per request")
    timeline: tuple[Phase, ...] = ()
    engine: EngineModel = Field(default_factory=EngineModel)
    capture: CaptureModel = Field(default_factory=CaptureModel)

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        for version, domains in self.acceptance.items():
            for domain, a in domains.items():
                if not 0.0 <= a <= 1.0:
                    raise ValueError(f"acceptance.{version}.{domain}: {a} is not in [0, 1]")
        starts = [p.at_s for p in self.timeline]
        if starts != sorted(starts):
            raise ValueError("timeline: phases must be in order of at_s")
        return self

    def acceptance_for(self, version: str | None, domain: str) -> Acceptance:
        """a of `version` on `domain`; "*" in the table is any version (or domain) not listed.

        The operator's run ids carry a hash of the TideDeployment's UID ("3fa9c2d1-r1"), unknown when
        the scenario is written: a candidate not listed by its id is looked up by its counter ("r1").
        """
        if version is None:
            return 0.0
        domains = (self.acceptance.get(version) or self.acceptance.get(_RUN_SUFFIX.sub(r"\1", version))
                   or self.acceptance.get("*") or {})
        return domains.get(domain, domains.get("*", self.default_acceptance))

    def phase_at(self, elapsed_s: float) -> Phase:
        current = Phase(at_s=0.0)
        for phase in self.timeline:
            if phase.at_s <= elapsed_s:
                current = phase
        return current

    def domain_at(self, elapsed_s: float) -> str:
        return self.phase_at(elapsed_s).domain or self.default_domain


def load_scenario(path: str | Path | None, seed: int | None = None) -> Scenario:
    """The scenario file (or the default one); `seed` overrides the file's."""
    data = {}
    if path is not None:
        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a scenario is a YAML mapping, got {type(data).__name__}")
    scenario = Scenario.model_validate(data)
    return scenario.model_copy(update={"seed": seed}) if seed is not None else scenario
