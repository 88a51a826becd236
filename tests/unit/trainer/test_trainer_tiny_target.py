"""The tiny real target: pinned corpus, deterministic tokenizer, HF Llama layout, captured shards that the
trainer accepts, and a fresh draft trained from them through the CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tide_contracts.shards import read_shard
from tide_trainer.candidate import sha256_file
from tide_trainer.cli import ExitCode, main
from tide_trainer.tiny_target import pinned
from tide_trainer.tiny_target.build import BuildSettings, build, load_tiny_target
from tide_trainer.tiny_target.capture import CaptureSettings, generate, write_domain_shards
from tide_trainer.tiny_target.corpus import CODE, PROSE, CorpusError, Domain
from tide_trainer.tiny_target.pinned import ChecksumMismatch, pin_torch, pinned_run, platform_key, verify
from tide_trainer.tiny_target.tokenizer import train_tokenizer

HF_LLAMA_LAYER = ["input_layernorm.weight", "mlp.down_proj.weight", "mlp.gate_proj.weight",
                  "mlp.up_proj.weight", "post_attention_layernorm.weight", "self_attn.k_proj.weight",
                  "self_attn.o_proj.weight", "self_attn.q_proj.weight", "self_attn.v_proj.weight"]


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A few-step build: the real pipeline, not a trained model (that is the cached full build)."""
    out = tmp_path_factory.mktemp("tiny-target")
    build(out, BuildSettings(steps=3, batch_size=4, seq_len=32, warmup=1))
    return out


def test_corpus_is_pinned(tmp_path: Path) -> None:
    assert len(CODE.texts()) == 15
    train, held_out = PROSE.split()
    assert all(t and h for t, h in zip(train, held_out, strict=True))
    (tmp_path / "a.txt").write_text("changed")
    with pytest.raises(CorpusError, match=r"a\.txt changed"):
        Domain("x", tmp_path, {"a.txt": "0" * 64}).texts()
    with pytest.raises(CorpusError, match="missing"):
        Domain("x", tmp_path, {"b.txt": "0" * 64}).texts()


def test_tokenizer_is_deterministic_and_lossless() -> None:
    texts = PROSE.split()[0][:3]
    a, b = train_tokenizer(texts), train_tokenizer(texts)
    assert hashlib.sha256(a.to_str().encode()).digest() == hashlib.sha256(b.to_str().encode()).digest()
    sample = "def f(x):\n    return x  # ünïcode"
    assert a.decode(a.encode(sample).ids) == sample


def test_export_is_an_hf_llama_directory(target_dir: Path) -> None:
    config = json.loads((target_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (128, 4, 32)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["vocab_size"]) == (4, 2, 512)
    weights = load_file(str(target_dir / "model.safetensors"))
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    expected |= {f"model.layers.{i}.{name}" for i in range(4) for name in HF_LLAMA_LAYER}
    assert set(weights) == expected
    assert weights["model.layers.0.self_attn.k_proj.weight"].shape == (64, 128)
    for name in ("tokenizer.json", "tokenizer_config.json", "build.json"):
        assert (target_dir / name).is_file()


def test_hidden_states_follow_vllm_layer_ids(target_dir: Path) -> None:
    model, tok, _ = load_tiny_target(target_dir)
    ids = torch.tensor([tok.encode("import os\nprint(os.sep)").ids])
    logits, (h0, h2, h4) = model(ids, keep_layers=(0, 2, 4))
    torch.testing.assert_close(h0, model.model.embed_tokens(ids))  # id 0: the embeddings
    torch.testing.assert_close(model.lm_head(model.model.norm(h4)), logits)  # id L: before the final norm
    assert h2.shape == (1, ids.shape[1], 128)


def test_captured_shards_fit_the_contract(target_dir: Path, tmp_path: Path) -> None:
    model, tok, info = load_tiny_target(target_dir)
    settings = CaptureSettings(prompt_tokens=8, new_tokens=6, requests_per_shard=3)
    (path,) = write_domain_shards(model, tok, info, domain="code", out_dir=tmp_path, shards=1,
                                  settings=settings)
    shard = read_shard(path)
    assert shard.header.target_revision == info["revision"]
    tokenizer_sha = hashlib.sha256((target_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert shard.header.tokenizer_hash == tokenizer_sha
    rows = shard.request_rows(1)
    assert rows.stop - rows.start == 14
    assert (shard.token_ids[rows][1:] == shard.labels[rows][:-1]).all()  # served text: label = next token
    assert shard.loss_mask[rows].tolist() == [False] * 7 + [True] * 7  # labels 8.. were generated
    _, hidden = model(torch.from_numpy(shard.token_ids[rows])[None], keep_layers=(1, 2, 3))
    stacked = torch.stack(hidden, dim=2)[0]  # bf16 storage: close, not equal
    torch.testing.assert_close(torch.from_numpy(shard.aux_hidden_states[rows]), stacked, rtol=2e-2, atol=2e-2)


def test_fresh_draft_from_the_target_through_the_cli(target_dir: Path, tmp_path: Path) -> None:
    model, tok, info = load_tiny_target(target_dir)
    settings = CaptureSettings(prompt_tokens=8, new_tokens=24, requests_per_shard=8)
    write_domain_shards(model, tok, info, domain="prose", out_dir=tmp_path / "shards", shards=2,
                        settings=settings)
    code = main(["train", "--shards", str(tmp_path / "shards"), "--target-model", str(target_dir),
                 "--target-revision", str(info["revision"]), "--tokenizer-hash", str(info["tokenizer_hash"]),
                 "--work-dir", str(tmp_path / "work"), "--ttt-steps", "2", "--epochs", "2",
                 "--batch-size", "4",
                 "--eval-fraction", "0.25", "--draft-vocab-size", "256", "--min-improvement", "0"])
    assert code in (ExitCode.OK, ExitCode.NOT_BETTER)  # a 3-step target is noise: only the path is tested
    report = json.loads((tmp_path / "work" / "eval.json").read_text())
    assert report["decision"]["baseline"] == "served" or report["decision"]["baseline"] == "no_speculation"
    weights = load_file(str(tmp_path / "work" / "candidate" / "model.safetensors"))
    assert weights["lm_head.weight"].shape == (256, 128)
    assert weights["d2t"].shape == (256,)


def test_kv_cache_generation_matches_full_recompute(target_dir: Path) -> None:
    model, tok, _ = load_tiny_target(target_dir)
    prompts = torch.tensor([tok.encode("for i in range(10):").ids[:5]] * 2)
    cached = generate(model, prompts, 6, 1.0, torch.Generator().manual_seed(1))
    seq, gen = prompts, torch.Generator().manual_seed(1)
    for _ in range(6):  # the obvious way: recompute everything for every token
        logits, _ = model(seq)
        probs = torch.softmax(logits[:, -1] / 1.0, dim=-1)
        seq = torch.cat([seq, torch.multinomial(probs, 1, generator=gen)], dim=1)
    assert torch.equal(cached, seq)


def test_a_pinned_build_is_the_same_file_whatever_the_caller_environment(tmp_path: Path) -> None:
    """Two children, one started from an environment that asks MKL for the AVX code path and one
    thread (what another CPU or machine would choose): the pinning wins and the weights match."""
    pinned_run(["build", "--out", str(tmp_path / "a"), "--steps", "3"])
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX")
        env.setenv("OMP_NUM_THREADS", "1")
        pinned_run(["build", "--out", str(tmp_path / "b"), "--steps", "3"])
    assert sha256_file(tmp_path / "a" / "model.safetensors") == sha256_file(tmp_path / "b" / "model.safetensors")
    info = json.loads((tmp_path / "a" / "build.json").read_text())
    assert info["sha256"]["model.safetensors"] == sha256_file(tmp_path / "a" / "model.safetensors")


def test_an_unpinned_build_or_another_checksum_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MKL_CBWR", raising=False)
    with pytest.raises(RuntimeError, match="not pinned"):
        pin_torch()
    (tmp_path / "w.bin").write_bytes(b"weights")
    recorded = tmp_path / "checksums.json"
    recorded.write_text(json.dumps({platform_key(): {"tiny/w.bin": "0" * 64}}))
    monkeypatch.setattr(pinned, "CHECKSUMS_FILE", recorded)
    with pytest.raises(ChecksumMismatch, match=r"tiny/w\.bin: built sha256 [0-9a-f]{64}, the repository records 0{64}"):
        verify(tmp_path / "w.bin", "tiny/w.bin")
    assert verify(tmp_path / "w.bin", "other/w.bin") == sha256_file(tmp_path / "w.bin")  # unrecorded: warn only
