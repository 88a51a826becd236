"""Capture without the engine: served-row selection, per-request accumulation, shards on disk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tide_contracts.registry import CAPTURE_SIGNATURE_METADATA
from tide_contracts.shards import read_shard
from tide_contracts.signature import domain_signature, signature_from_metadata
from tide_serving.capture_recorder import CaptureCounters, CapturedRequest, CaptureRecorder, is_sampled
from tide_serving.capture_rows import ServedRows, row_indices, served_rows
from tide_serving.capture_writer import CaptureWriter, ShardIdentity, bf16_bits_to_float32, build_shard

H = 4


def test_served_rows_drop_rejected_draft_rows() -> None:
    # a: prefill of 5 prompt tokens; b: decode, 3 drafts, 1 accepted (+ bonus); c: decode, all 3 accepted
    blocks = served_rows(["a", "b", "c"], {"a": 5, "b": 4, "c": 4}, {"b": 3, "c": 3},
                         {"a": [7], "b": [8, 9], "c": [1, 2, 3, 4]})
    assert [(b.request_id, b.start, b.count) for b in blocks] == [("a", 0, 5), ("b", 5, 2), ("c", 9, 4)]
    assert row_indices(blocks) == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12]


def test_partial_prefill_chunk_keeps_all_rows_and_emits_nothing() -> None:
    (block,) = served_rows(["a"], {"a": 6}, {}, {"a": []})
    assert (block.count, block.sampled) == (6, ())


def test_served_rows_reject_impossible_draft_counts() -> None:
    with pytest.raises(ValueError, match="cannot fit"):
        served_rows(["a"], {"a": 2}, {"a": 3}, {"a": [1]})


class Steps:
    """Feeds a recorder the way the runner tap does, with aux = token id in every cell."""

    def __init__(self, rate: float = 1.0, max_rows: int = 1000) -> None:
        self.samples: list[CapturedRequest] = []
        self.counters = CaptureCounters()
        self.rec = CaptureRecorder(self._sink, self.counters, max_rows)
        self.rec.configure(True, rate)
        self.prompt_len: dict[str, int] = {}

    def _sink(self, s: CapturedRequest) -> bool:
        self.samples.append(s)
        return True

    def step(self, rows: dict[str, tuple[int, list[int], int, list[int]]]) -> None:
        """rows: request -> (first position, input tokens, drafts, emitted tokens)."""
        order = list(rows)
        blocks = served_rows(order, {r: len(v[1]) for r, v in rows.items()},
                             {r: v[2] for r, v in rows.items()}, {r: v[3] for r, v in rows.items()})
        pos = {b.request_id: rows[b.request_id][0] for b in blocks}
        chosen = self.rec.select(blocks, lambda b: pos[b.request_id], lambda r: self.prompt_len[r])
        tok = np.array([t for b in chosen for t in rows[b.request_id][1][: b.count]], dtype=np.int64)
        p = np.array([rows[b.request_id][0] + i for b in chosen for i in range(b.count)], dtype=np.int64)
        aux = np.repeat(tok.astype(np.float32)[:, None, None], 3, axis=1).repeat(H, axis=2)
        self.rec.record(chosen, p, tok, aux)


def test_recorder_builds_labels_and_loss_mask_from_served_rows() -> None:
    s = Steps()
    s.prompt_len["r"] = 3
    s.step({"r": (0, [10, 11, 12], 0, [13])})          # prefill, emits 13
    s.step({"r": (3, [13, 14, 98, 97], 3, [14, 15])})  # 1 of 3 drafts accepted: rows 98, 97 rejected
    s.step({"r": (5, [15, 16, 17, 18], 3, [16, 17, 18, 19])})
    s.rec.finish(["r"])
    (sample,) = s.samples
    assert sample.token_ids.tolist() == [10, 11, 12, 13, 14, 15, 16, 17, 18]
    assert sample.labels.tolist() == [11, 12, 13, 14, 15, 16, 17, 18, 19]
    assert sample.loss_mask.tolist() == [False, False] + [True] * 7
    assert sample.aux[:, 0, 0].tolist() == sample.token_ids.tolist()
    assert s.counters.captured_tokens == 9


def test_recorder_skips_running_requests_and_unsampled_ones() -> None:
    s = Steps(rate=0.5)
    s.prompt_len.update({"old": 3})
    s.step({"old": (7, [20, 21], 1, [22, 23])})  # first seen in decode: its beginning is lost
    ids = [f"req-{i}" for i in range(200)]
    for r in ids:
        s.prompt_len[r] = 2
        s.step({r: (0, [1, 2], 0, [3])})
    s.rec.finish(["old", *ids])
    captured = {x.request_id for x in s.samples}
    assert "old" not in captured
    assert captured == {r for r in ids if is_sampled(r, 0.5)}
    assert 60 < len(captured) < 140


def test_recorder_drops_whole_requests_over_budget_and_dedupes_recomputed_rows() -> None:
    s = Steps(max_rows=6)
    s.prompt_len.update({"a": 4, "b": 4})
    s.step({"a": (0, [1, 2, 3, 4], 0, [5]), "b": (0, [6, 7, 8, 9], 0, [10])})  # b exceeds the budget
    s.step({"a": (0, [1, 2, 3, 4, 5], 0, [11])})  # recomputed after preemption: only position 4 is new
    s.rec.finish(["a", "b"])
    (a,) = s.samples
    assert a.token_ids.tolist() == [1, 2, 3, 4, 5]
    assert a.labels.tolist() == [2, 3, 4, 5, 11]
    assert s.counters.dropped_samples == 1
    assert s.rec.buffered_rows == 0


def test_turning_capture_off_hands_over_pending_requests() -> None:
    s = Steps()
    s.prompt_len["r"] = 2
    s.step({"r": (0, [1, 2], 0, [3])})
    s.rec.configure(False, 1.0)
    assert [x.token_ids.tolist() for x in s.samples] == [[1, 2]]
    s.step({"r": (2, [3], 0, [4])})
    assert s.rec.select([ServedRows("n", 0, 1, ())], lambda b: 0, lambda r: 1) == []


IDENT = ShardIdentity("rev-1", "tokhash", (1, 2, 3), H, "pod-a")


def _sample(req: str, tokens: list[int]) -> CapturedRequest:
    t = np.array(tokens, dtype=np.int64)
    aux = np.random.default_rng(0).standard_normal((len(t), 3, H)).astype(np.float32)
    return CapturedRequest(req, t, aux, t + 1, np.ones(len(t), dtype=bool))


def test_build_shard_roundtrips_through_the_trainers_reader() -> None:
    from tide_contracts.shards import shard_to_bytes

    samples = [_sample("a", [1, 2, 3]), _sample("b", [4, 5])]
    shard = read_shard(shard_to_bytes(build_shard(samples, IDENT, "v3")))
    assert shard.request_offsets.tolist() == [0, 3, 5]
    assert shard.token_ids.tolist() == [1, 2, 3, 4, 5]
    assert [r.draft_version for r in shard.header.requests] == ["v3", "v3"]
    # stored as bf16: within bf16 rounding of the float32 input
    np.testing.assert_allclose(shard.aux_hidden_states[:3], samples[0].aux, rtol=1e-2, atol=1e-2)


def test_bf16_bits_decode_exactly() -> None:
    bits = np.array([0x3F80, 0xC000, 0x0000], dtype=np.uint16)  # 1.0, -2.0, 0.0
    assert bf16_bits_to_float32(bits).tolist() == [1.0, -2.0, 0.0]


def test_writer_flushes_shards_and_bounds_its_queue(tmp_path: Path) -> None:
    counters = CaptureCounters()
    writer = CaptureWriter(IDENT, counters, shard_rows=100, queue_rows=6, flush_interval_s=60.0,
                           draft_version=lambda: "v1")
    writer.destination = str(tmp_path)
    assert writer.submit(_sample("a", [1, 2, 3]))
    assert writer.submit(_sample("b", [4, 5, 6]))
    assert not writer.submit(_sample("c", [7]))  # over the 6-row queue budget
    assert writer.flush()
    files = sorted(tmp_path.rglob("*.safetensors"))
    assert [f.parent.name for f in files] == ["pod-a"]
    assert sum(read_shard(f).num_tokens for f in files) == 6
    assert counters.shards_written == len(files)
    assert counters.captured_bytes == sum(f.stat().st_size for f in files)
    assert writer.buffered_rows == 0


def test_writer_counts_failed_uploads_and_keeps_going(tmp_path: Path) -> None:
    counters = CaptureCounters()
    writer = CaptureWriter(IDENT, counters, shard_rows=1, queue_rows=100, flush_interval_s=60.0,
                           draft_version=lambda: None)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    writer.destination = str(blocker)
    writer.submit(_sample("a", [1]))
    writer.flush()
    assert counters.write_errors == 1
    writer.destination = str(tmp_path / "ok")
    writer.submit(_sample("b", [2]))
    writer.flush()
    assert counters.shards_written == 1


def test_writer_uploads_to_s3() -> None:
    boto3 = pytest.importorskip("boto3")
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="cap")
        counters = CaptureCounters()
        writer = CaptureWriter(IDENT, counters, shard_rows=100, queue_rows=100, flush_interval_s=60.0,
                               draft_version=lambda: "v2")
        writer.destination = "s3://cap/captures/dep-1"
        writer.submit(_sample("a", [1, 2]))
        writer.flush()
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="cap")["Contents"]]
        assert len(keys) == 1
        assert keys[0].startswith("captures/dep-1/pod-a/")
        stored = s3.get_object(Bucket="cap", Key=keys[0])
        shard = read_shard(stored["Body"].read())
        assert shard.token_ids.tolist() == [1, 2]
        # The shard's rows' signature rides in its metadata, the trainer's over the same rows (up to the bf16
        # rounding of the stored rows: a pod's rows are bf16 already, this test's float32).
        expected = domain_signature([shard.aux_hidden_states], IDENT.hidden_size)
        carried = signature_from_metadata(stored["Metadata"][CAPTURE_SIGNATURE_METADATA])
        assert expected is not None
        assert carried is not None
        assert carried.tokens == expected.tokens == 2
        assert carried.mean == pytest.approx(expected.mean, abs=1e-2)
        assert stored["Metadata"]["samples"] == "1"
