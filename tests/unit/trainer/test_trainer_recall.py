"""`tide_trainer recall` (issue 16) end to end on tiny shards and a loopback S3 registry: the draft trained on
the traffic since the shift outscores the served draft trained on other traffic, the report is the only
object written, a draft that cannot be loaded or verified is skipped, and nothing to compare exits 9."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from synthetic_shards import HIDDEN, REVISION, TOKENIZER, VOCAB, write_buffer

from tide_contracts.recall import RECALL_REPORT_FILE, RecallReport
from tide_contracts.registry import DraftRegistry
from tide_trainer.candidate import build_manifest, upload_candidate
from tide_trainer.cli import ExitCode, main
from tide_trainer.recall import eval_samples, newest_shards
from tide_trainer.run import open_source

TRAIN_FAST = ["--ttt-steps", "2", "--epochs", "4", "--lr", "0.01", "--batch-size", "4", "--eval-fraction", "0.3",
              "--speculative-tokens", "2", "--target-revision", REVISION]
OTHER_DOMAIN = 99  # world_seed of the traffic before the shift


@pytest.fixture(scope="module")
def drafts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two drafts trained alike: one on the traffic since the shift, one on the traffic before it."""
    root = tmp_path_factory.mktemp("drafts")
    out = {}
    for name, world in (("on_domain", 1234), ("off_domain", OTHER_DOMAIN)):
        shards = write_buffer(root / f"shards-{name}", world_seed=world)
        code = main(["train", "--shards", str(shards), "--target-model", str(_tiny_target(root)),
                     "--work-dir", str(root / name), *TRAIN_FAST])
        assert code in (ExitCode.OK, ExitCode.NOT_BETTER)
        out[name] = root / name / "candidate"
    return out


def _tiny_target(root: Path) -> Path:
    """A target dir a fresh draft can take its widths and embedding from (the synthetic world's sizes)."""
    target = root / "target"
    if not target.is_dir():
        target.mkdir()
        (target / "config.json").write_text(json.dumps({
            "num_hidden_layers": 4, "vocab_size": VOCAB, "hidden_size": HIDDEN, "intermediate_size": 64,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16}))
        torch.manual_seed(0)
        save_file({"model.embed_tokens.weight": torch.randn(VOCAB, HIDDEN), "model.norm.weight": torch.ones(HIDDEN)},
                  str(target / "model.safetensors"))
    return target


@dataclass
class Registry:
    s3: object
    bucket: str
    registry: DraftRegistry

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/ns/chat"

    def promote(self, run_id: str, draft: Path, revision: str = REVISION) -> str:
        """drafts/vN of this draft, promoted the way the operator promotes a candidate."""
        files = [draft / "config.json", draft / "model.safetensors"]
        manifest = build_manifest(run_id=run_id, files=files, parent=None, target_revision=revision,
                                  tokenizer_hash=TOKENIZER, samples={}, evaluation={}, draft={},
                                  training_window=None)
        upload_candidate(self.uri, run_id, files, manifest, self.s3)
        pointer = self.registry.promote(run_id, target_revision=revision, tokenizer_hash=TOKENIZER,
                                        now=datetime.now(UTC))
        return pointer.version

    def draft(self, version: str) -> str:
        return f"{self.uri}/drafts/{version}"

    def keys(self, prefix: str) -> set[str]:
        listing = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=f"ns/chat/{prefix}")  # type: ignore[attr-defined]
        return {o["Key"] for o in listing.get("Contents", [])}


@pytest.fixture
def registry(s3: object, tmp_path: Path) -> Registry:
    """A registry whose captures/ hold the traffic since the shift, claimed for run r7 as the operator does."""
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    for path in sorted(write_buffer(tmp_path / "since-shift", shards=4).iterdir()):
        s3.put_object(Bucket=bucket, Key=f"ns/chat/captures/{path.name}", Body=path.read_bytes())  # type: ignore[attr-defined]
    reg = DraftRegistry(s3, bucket, "ns/chat")
    reg.put_claim("r7", reg.list_captures(), created_at=1.0, expires_at=601.0)
    return Registry(s3, bucket, reg)


def _recall(reg: Registry, tmp_path: Path, *drafts: str, served: str | None = None, run_id: str = "r7") -> int:
    args = ["recall", "--shards", f"{reg.uri}/captures", "--shard-claim", f"{reg.uri}/claims/r7.json",
            "--target-revision", REVISION, "--tokenizer-hash", TOKENIZER, "--registry", reg.uri, "--run-id", run_id,
            "--speculative-tokens", "2", "--captured-since", "1700000000", "--work-dir", str(tmp_path / "recall")]
    for draft in drafts:
        args += ["--pooled-drafts", draft]
    return main(args + (["--served-draft", served] if served else []))


def _summary(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_the_draft_of_the_new_traffic_outscores_the_served_one(
        registry: Registry, drafts: dict[str, Path], parent_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    on, off = registry.promote("run-on", drafts["on_domain"]), registry.promote("run-off", drafts["off_domain"])
    other_target = registry.promote("run-rev-b", drafts["on_domain"], revision="rev-b")
    corrupt = registry.promote("run-corrupt", drafts["on_domain"])
    registry.s3.put_object(Bucket=registry.bucket, Key=f"ns/chat/drafts/{corrupt}/model.safetensors",  # type: ignore[attr-defined]
                           Body=b"not the promoted weights")
    monkeypatch.setenv("TIDE_S3_SSE", "AES256")
    code = _recall(registry, tmp_path, f"{on}={registry.draft(on)}", f"initial={parent_dir}",
                   f"{other_target}={registry.draft(other_target)}", f"{corrupt}={registry.draft(corrupt)}",
                   f"v9={registry.draft('v9')}", served=f"{off}={registry.draft(off)}")
    summary = _summary(capsys)
    assert code == ExitCode.OK, summary
    report = registry.registry.recall_report("r7")
    assert isinstance(report, RecallReport)
    assert report.served_version == off
    assert {s.version for s in report.scores} == {on, "initial"}  # the three others could not be verified
    assert summary["skipped"] == sorted([other_target, corrupt, "v9"])
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"draft {other_target}: trained for target revision 'rev-b'" in w for w in warnings)
    assert any(f"draft {corrupt}: model.safetensors sha256" in w for w in warnings)
    scores = {s.version: s.acceptance_length for s in report.scores}
    assert scores[on] > report.served_acceptance_length  # trained on this traffic beats trained on other traffic
    assert scores[on] > scores["initial"]  # ... and the untrained launch draft
    best = report.best()
    assert best is not None
    assert best.version == on
    assert report.captured_since == 1700000000.0
    assert report.eval_tokens == 4 * 6 * 24  # every claimed request, under the default token bound
    # the report alone: no candidate files, no manifest; written with the Job's encryption
    key = f"ns/chat/candidates/r7/{RECALL_REPORT_FILE}"
    assert registry.keys("candidates/r7/") == {key}
    head = registry.s3.head_object(Bucket=registry.bucket, Key=key)  # type: ignore[attr-defined]
    assert head["ServerSideEncryption"] == "AES256"


def test_nothing_to_compare_exits_9_without_a_report(registry: Registry, drafts: dict[str, Path],
                                                     parent_dir: Path, tmp_path: Path) -> None:
    on = registry.promote("run-on", drafts["on_domain"])
    registry.s3.delete_object(Bucket=registry.bucket, Key=f"ns/chat/drafts/{on}/config.json")  # type: ignore[attr-defined]
    # every pooled draft unusable
    assert _recall(registry, tmp_path, f"{on}={registry.draft(on)}", f"v9={registry.draft('v9')}") == \
        ExitCode.NO_DRAFT
    # the served draft unusable: the others have nothing to be compared with
    assert _recall(registry, tmp_path, f"initial={parent_dir}", served=f"{on}={registry.draft(on)}") == \
        ExitCode.NO_DRAFT
    assert registry.keys("candidates/r7/") == set()


def test_without_a_served_draft_the_baseline_is_no_speculation(registry: Registry, parent_dir: Path,
                                                               tmp_path: Path) -> None:
    assert _recall(registry, tmp_path, f"initial={parent_dir}") == ExitCode.OK
    report = registry.registry.recall_report("r7")
    assert report is not None
    assert report.served_version is None
    assert report.served_acceptance_length == 1.0


def test_requests_too_short_to_draft_exit_3(s3: object, parent_dir: Path, tmp_path: Path) -> None:
    bucket = f"tide-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    code = main(["recall", "--shards", str(write_buffer(tmp_path / "short", length=2)), "--target-revision", REVISION,
                 "--registry", f"s3://{bucket}/ns/chat", "--run-id", "r7", "--speculative-tokens", "2",
                 "--pooled-drafts", f"initial={parent_dir}", "--work-dir", str(tmp_path / "recall")])
    assert code == ExitCode.NO_DATA
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # type: ignore[attr-defined]


@pytest.mark.parametrize("drafts", [
    [], ["v0=s3://b/p/drafts/v0"], ["latest=s3://b/p/drafts/v3"], ["v3"], ["v3=s3://b/x", "v3=s3://b/y"],
    ["v1\n=s3://b/p/drafts/v1"],
])
def test_bad_draft_names_exit_2(registry: Registry, tmp_path: Path, drafts: list[str]) -> None:
    assert _recall(registry, tmp_path, *drafts) == ExitCode.BAD_CONFIG


def test_the_served_draft_is_never_scored_as_a_pooled_one(registry: Registry, tmp_path: Path) -> None:
    assert _recall(registry, tmp_path, "v3=s3://b/p/drafts/v3", served="v3=s3://b/p/drafts/v3") == \
        ExitCode.BAD_CONFIG


def test_the_token_bound_reads_only_the_newest_shards(tmp_path: Path) -> None:
    root = write_buffer(tmp_path / "shards", shards=4)  # 6 requests of 24 tokens per shard
    read: list[str] = []
    source = open_source(str(root))
    original = source.read_bytes

    def counting(ref):  # type: ignore[no-untyped-def]
        read.append(ref.name)
        return original(ref)

    source.read_bytes = counting  # type: ignore[method-assign]
    shards = newest_shards(source, 150, REVISION, TOKENIZER)
    assert read == ["shard-0003.safetensors", "shard-0002.safetensors"]  # 144 tokens, then 288 >= 150
    samples = eval_samples(shards, 512, 150)
    assert sum(int(s.labels.shape[0]) for s in samples) == 150
    assert samples[0].request.request_id == "req-305"  # the newest request first
