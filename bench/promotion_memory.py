"""Operator memory while promoting a large candidate: peak RSS above idle (target: under 100 MiB).

    .venv/bin/python bench/promotion_memory.py [--size-mib 2048] [--multipart-threshold-mib N] [--check]

A loopback S3 (moto's server mode, in its own process) holds a candidate of --size-mib written by
the trainer's own code (tide_trainer.candidate: config.json, model.safetensors, eval.json, then
manifest.json with each file's sha256). The promotion runs in a child process that is the
operator's promotion path and nothing else: it builds the registry with the operator's factory
(control_step.make_registry, the threshold from the operator configuration) and calls
DraftRegistry.promote, as ClusterEffects.promote does.

Idle is the child after its imports, its S3 client and one S3 round trip (reading promoted.json).
Why a child: the parent wrote 2 GiB and holds the trainer's imports; a fresh process measures only
promotion. Peak: the kernel's high-water mark (VmHWM, reset at idle by writing 5 to
/proc/self/clear_refs), cross-checked by a thread sampling VmRSS every --sample-ms; the larger one
counts. The first copy call also loads botocore's models for the copy operations: counted, so the
number is conservative. --check exits 1 when the peak above idle is >= 100 MiB or the promoted draft
is not the candidate.

moto's server is slow at large multipart copies: every UploadPartCopy reads the whole source, and
CompleteMultipartUpload joins the parts in memory. When that join outlasts the operator's 30 s read
timeout, botocore retries it while moto still works on the first one, and moto fails both (seen at
2 GiB in 512 MiB parts on a loaded machine; 2 GiB in 1 GiB parts completed in 25 s). Real S3 keeps
such a connection alive with whitespace while it completes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

TARGET_MIB = 100.0
NAME, NAMESPACE, REVISION, RUN_ID = "promotion", "bench", "bench-rev", "bench-run"
SECRET = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
MiB = 2**20


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mib", type=int, default=2048, help="size of the candidate's model.safetensors")
    p.add_argument("--multipart-threshold-mib", type=int, default=None,
                   help="operator config promotion.multipartCopyThresholdMib (default: the config's own)")
    p.add_argument("--sample-ms", type=float, default=5.0, help="RSS sampling interval of the cross-check")
    p.add_argument("--moto-log", type=Path, default=None, help="keep the S3 server's log here")
    p.add_argument("--check", action="store_true", help=f"exit 1 unless the peak above idle is < {TARGET_MIB} MiB")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # the promoting process: its JSON args
    return p.parse_args(argv)


# -- the measured process ------------------------------------------------------------------------
def rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class PeakSampler(threading.Thread):
    def __init__(self, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.peak_kib, self.samples = interval_s, rss_kib(), 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.interval_s):
            self.peak_kib, self.samples = max(self.peak_kib, rss_kib()), self.samples + 1


class StubCluster:
    """The one Cluster call make_registry makes: the tenant's credentials Secret."""

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return dict(SECRET)


def operator_registry(job: dict[str, Any]) -> Any:
    from tide_operator.api import parse_spec
    from tide_operator.config import load_operator_config
    from tide_operator.passes.control_step import make_registry

    raw = {"promotion": {"multipartCopyThresholdMib": job["threshold_mib"]}} if job["threshold_mib"] else {}
    config = load_operator_config(raw)
    spec = parse_spec({"target": {"model": "m", "revision": REVISION}, "storage": {"s3": {
        "bucket": job["bucket"], "endpoint": job["endpoint"], "credentialsSecret": "bench-s3"}}})
    return make_registry(NAME, NAMESPACE, spec, StubCluster(),  # type: ignore[arg-type]
                         multipart_copy_threshold=config.promotion.multipart_copy_threshold_bytes)


def promote_in_child(job: dict[str, Any]) -> dict[str, Any]:
    from datetime import UTC, datetime

    registry = operator_registry(job)
    calls: Counter[str] = Counter()
    registry.client.meta.events.register(
        "before-call.s3", lambda event_name, **_: calls.update([event_name.rsplit(".", 1)[-1]]))
    registry.promoted()  # idle: imports done, client built, one round trip made
    kernel_peak = reset_peak()
    idle = rss_kib()
    sampler = PeakSampler(job["sample_ms"] / 1000)
    sampler.start()
    start = time.monotonic()
    pointer = registry.promote(RUN_ID, target_revision=REVISION, tokenizer_hash=None, now=datetime.now(UTC))
    seconds = time.monotonic() - start
    sampler.done.set()
    sampler.join()
    peaks = {"sampled": sampler.peak_kib, **({"kernel": rss_kib("VmHWM")} if kernel_peak else {})}
    return {"version": pointer.version, "idle_kib": idle, "peak_kib": peaks, "samples": sampler.samples,
            "seconds": seconds, "calls": dict(calls), "threshold": registry.multipart_copy_threshold}


# -- the harness -----------------------------------------------------------------------------------
def write_candidate_files(folder: Path, size_mib: int) -> list[Path]:
    """The trainer's export layout: config.json, model.safetensors (size_mib of distinct blocks), eval.json."""
    block = os.urandom(MiB)
    weights = folder / "model.safetensors"
    with weights.open("wb") as f:
        for i in range(size_mib):
            f.write(i.to_bytes(8, "little") + block[8:])  # no two blocks alike
    (folder / "config.json").write_text(json.dumps({"architectures": ["Eagle3Speculator"]}))
    (folder / "eval.json").write_text(json.dumps({"candidate_acceptance_length": 2.0}))
    return [folder / "config.json", weights, folder / "eval.json"]


def upload_candidate(client: Any, bucket: str, folder: Path, size_mib: int) -> Any:
    from tide_trainer.candidate import build_manifest
    from tide_trainer.candidate import upload_candidate as trainer_upload

    files = write_candidate_files(folder, size_mib)
    manifest = build_manifest(run_id=RUN_ID, files=files, parent=None, target_revision=REVISION,
                              tokenizer_hash=None, samples={}, evaluation={}, draft={}, training_window=None)
    trainer_upload(f"s3://{bucket}/{NAMESPACE}/{NAME}", RUN_ID, files, manifest, client=client)
    for path in files:
        path.unlink()  # the candidate lives in S3 now; keep the disk for moto's copies
    return manifest


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"promotion failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def promoted_matches(client: Any, bucket: str, manifest: Any, version: str) -> bool:
    """The draft the pointer names holds every candidate file at its size (its sha256 was verified)."""
    prefix = f"{NAMESPACE}/{NAME}/drafts/{version}/"
    sizes = {name: client.head_object(Bucket=bucket, Key=prefix + name)["ContentLength"] for name in manifest.files}
    return sizes == {name: entry.bytes for name, entry in manifest.files.items()}


def measure(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    import boto3

    from tide_serving.testing.loopback_s3 import loopback_s3

    with tempfile.TemporaryDirectory(prefix="tide-promotion-") as work, \
            loopback_s3(args.moto_log or Path(work) / "moto.log") as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint)
        bucket = "tide-promotion-bench"
        client.create_bucket(Bucket=bucket)
        started = time.monotonic()
        manifest = upload_candidate(client, bucket, Path(work), args.size_mib)
        print(f"candidate of {args.size_mib} MiB written by the trainer's code in {time.monotonic() - started:.1f}s",
              flush=True)
        result = run_child({"endpoint": endpoint, "bucket": bucket, "threshold_mib": args.multipart_threshold_mib,
                            "sample_ms": args.sample_ms})
        return result, promoted_matches(client, bucket, manifest, result["version"])


def report(args: argparse.Namespace, result: dict[str, Any], intact: bool) -> float:
    idle, peaks = result["idle_kib"], result["peak_kib"]
    above = {how: (kib - idle) / 1024 for how, kib in peaks.items()}
    calls = ", ".join(f"{n} {op}" for op, n in sorted(result["calls"].items()))
    print(f"promoted {result['version']} in {result['seconds']:.1f}s; S3 calls: {calls}")
    print(f"multipart copy threshold: {result['threshold'] / MiB:.0f} MiB; draft intact: {intact}")
    print(f"idle RSS {idle / 1024:.1f} MiB; peak above idle: "
          + ", ".join(f"{how} {mib:.1f} MiB" for how, mib in above.items())
          + f" ({result['samples']} samples)")
    worst = max(above.values())
    print(f"PEAK_RSS_ABOVE_IDLE_MIB {worst:.1f} (candidate {args.size_mib} MiB, target < {TARGET_MIB:.0f} MiB)")
    return worst


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(promote_in_child(json.loads(args.child))))
        return 0
    result, intact = measure(args)
    worst = report(args, result, intact)
    if args.check and (worst >= TARGET_MIB or not intact):
        print(f"CHECK FAILED: peak above idle {worst:.1f} MiB (target < {TARGET_MIB:.0f}), draft intact: {intact}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
