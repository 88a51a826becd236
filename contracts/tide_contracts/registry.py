"""The S3 draft registry of one TideDeployment (contract: docs/contracts/draft-registry.md, version 1).

s3://<bucket>/<prefix>/
  candidates/<run_id>/   the trainer's output: speculators files + manifest.json (written last)
  drafts/vN/             promoted copies, verified; vN is assigned by the operator, never reused
  promoted.json          the pointer to the served vN, replaced only by a conditional write
  history/               one object per promotion, rollback or rejection (no read-modify-write)
  captures/              the bounded rolling buffer of hidden-state shards
  claims/<run_id>.json   the shards a running trainer reads (pruning skips them until the run ends)
  pool.json              the draft pool's index (tide_contracts.draft_pool), replaced by compare-and-swap

No complete draft under drafts/ is ever deleted or overwritten (a copy that fails midway removes
only its own partial files). Promotion verifies by streaming and copies inside S3
(tide_contracts.draft_copy), so its memory does not grow with the draft. Promoting the run the
pointer already names is a no-op, so a retry never makes a second version of one run. A lost race
on the pointer raises PointerConflict; the pointer is never half-written (S3 puts are atomic per object).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tide_contracts.draft_copy import DEFAULT_MULTIPART_COPY_THRESHOLD, server_side_copy, stream_sha256
from tide_contracts.draft_pool import (
    DEFAULT_MAX_DRAFTS,
    POOL_FILE,
    POOL_VERSION,
    DomainSignature,
    DraftPool,
    for_target,
    served,
)
from tide_contracts.encryption import S3Encryption
from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix
from tide_contracts.recall import RECALL_REPORT_FILE, RECALL_REPORT_VERSION, RecallReport

CONTRACT_VERSION = 1
MANIFEST_FILE = "manifest.json"
POINTER_FILE = "promoted.json"
CLAIM_FILE = ".claim"  # created with If-None-Match: * to reserve a vN before any file is copied
CAPTURE_SAMPLES_METADATA = "samples"  # S3 user metadata on a capture object: requests it holds
_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")  # the trainer's run id
CLAIM_VERSION = 1  # claims/<run id>.json: docs/contracts/draft-registry.md


class RegistryError(RuntimeError):
    """The registry refused an operation or S3 failed; the message names the object."""


class ChecksumMismatch(RegistryError):
    pass


class IncompatibleDraft(RegistryError):
    """The draft is pinned to another target revision or tokenizer."""


class UnknownVersion(RegistryError):
    """No promoted draft of that version exists (a pointer flip to it is refused)."""


class PruneIncomplete(RegistryError):
    """S3 refused some keys of a delete; ``deleted`` holds the ones it did delete."""

    def __init__(self, deleted: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.deleted = deleted


class PointerConflict(RegistryError):
    """Someone else changed promoted.json (or took the version) between our read and our write."""


class PoolConflict(RegistryError):
    """pool.json changed (or vanished) between our read and our write: read it again and retry."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileEntry(_Frozen):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    bytes: int = Field(ge=0)


class Manifest(_Frozen):
    """manifest.json of a candidate (written by the trainer) and of a promoted draft."""

    manifest_version: int = 1
    # bootstrap: a freshly initialised head (`tide_trainer init`) under bootstrap/, never promoted
    kind: str = Field(pattern=r"^(candidate|draft|bootstrap)$")
    run_id: str
    version: str | None = None  # vN, set by the operator on promotion
    created_at: str
    promoted_at: str | None = None
    parent: str | None = None  # the vN it was fine-tuned from
    target_revision: str
    tokenizer_hash: str | None = None
    training_window: tuple[str, str] | None = None  # first and last capture time it learnt from
    draft: dict[str, Any] = Field(default_factory=dict)  # method, speculative_tokens, ...
    samples: dict[str, int] = Field(default_factory=dict)  # train_requests, eval_tokens, ...
    eval: dict[str, Any] = Field(default_factory=dict)  # the trainer's decision block
    files: dict[str, FileEntry]
    # The training captures' domain signature (the draft pool's key); None in manifests written before it.
    signature: DomainSignature | None = None

    @property
    def evaluation_acceptance_length(self) -> float | None:
        value = self.eval.get("candidate_acceptance_length")
        return float(value) if value is not None else None


class PromotedPointer(_Frozen):
    contract_version: int = CONTRACT_VERSION
    version: str = Field(pattern=r"^v[1-9][0-9]*$")
    run_id: str
    target_revision: str
    tokenizer_hash: str | None = None
    updated_at: str
    # sha256 of drafts/<version>/manifest.json as the operator wrote it: pods check the manifest they
    # fetch against it (DraftLoadRequest.manifest_sha256). None in pointers written before it existed.
    manifest_sha256: str | None = None


class HistoryEntry(_Frozen):
    action: str = Field(pattern=r"^(promote|rollback|reject)$")
    at: str
    version: str | None = None  # the version the pointer names afterwards
    previous: str | None = None  # the version it named before
    run_id: str | None = None
    reason: str = ""
    manual: bool = False  # a user asked for it (tide promote / tide rollback), not the loop


@dataclass(frozen=True)
class CaptureObject:
    key: str
    size: int
    last_modified: float  # epoch seconds
    samples: int


class CaptureSampleCache:
    """Samples per capture object, keyed by (key, ETag), so a listing HEADs only new objects.

    Capture objects are written once and never changed, so a count read once stays true; the ETag
    in the key covers an object overwritten under the same name anyway. Bounded: the oldest
    entries go first (the buffer itself is capped, so a live deployment stays well under it).
    """

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._samples: dict[tuple[str, str], int] = {}

    def get(self, key: str, etag: str) -> int | None:
        return self._samples.get((key, etag))

    def put(self, key: str, etag: str, samples: int) -> None:
        self._samples[(key, etag)] = samples
        while len(self._samples) > self.max_entries:
            del self._samples[next(iter(self._samples))]

    def __len__(self) -> int:
        return len(self._samples)


@dataclass(frozen=True)
class CaptureLimits:
    """spec.control.capture: caps of the rolling buffer (seconds for retention)."""

    max_samples: int = 4096
    max_bytes: int = 2 * 1024**3
    retention_s: float = 86400.0


class DraftRegistry:
    """All registry I/O over one boto3 S3 client (the only module here that talks to S3)."""

    def __init__(
        self, client: Any, bucket: str, prefix: str, *, sse: str | None = None, kms_key_id: str | None = None,
        sample_cache: CaptureSampleCache | None = None,
        multipart_copy_threshold: int = DEFAULT_MULTIPART_COPY_THRESHOLD,
    ) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")
        self.multipart_copy_threshold = multipart_copy_threshold  # bytes; larger files copy in parts
        # A caller that lists captures every pass keeps one cache across registries (and passes).
        self.sample_cache = sample_cache if sample_cache is not None else CaptureSampleCache()
        # Every write of this registry carries it (put, upload, copy): encryption.put_args().
        self.encryption = S3Encryption(sse, kms_key_id)
        self._sse: dict[str, str] = self.encryption.put_args()

    # -- keys ---------------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    # -- reads --------------------------------------------------------------------------------
    def candidate_manifest(self, run_id: str) -> Manifest:
        return Manifest.model_validate_json(self._get(self.key("candidates", run_id, MANIFEST_FILE)))

    def candidate_report(self, run_id: str) -> dict[str, Any] | None:
        """The candidate's evaluation report (eval.json, trainer contract), None if it has none."""
        try:
            report = json.loads(self._get(self.key("candidates", run_id, "eval.json")))
        except (RegistryError, ValueError):
            return None
        return report if isinstance(report, dict) else None

    def recall_report(self, run_id: str) -> RecallReport | None:
        """The recall evaluation's report (candidates/<run_id>/recall.json), None until the Job wrote it.

        One that does not parse is a RegistryError naming the key: an evaluation that ended but cannot
        be read must not pass for one still running.
        """
        if not _RUN_ID_RE.match(run_id):
            raise RegistryError(f"recall report: run id {run_id!r} does not match {_RUN_ID_RE.pattern}")
        key = self.key("candidates", run_id, RECALL_REPORT_FILE)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise RegistryError(f"reading {key}: {e}") from e
        try:
            return RecallReport.model_validate_json(body)
        except ValidationError as e:
            raise RegistryError(f"{key} is not a recall report of report_version {RECALL_REPORT_VERSION}: "
                                f"{e}") from e

    def draft_manifest(self, version: str) -> Manifest:
        return Manifest.model_validate_json(self._get(self.key("drafts", version, MANIFEST_FILE)))

    def list_candidates(self) -> list[str]:
        """Run ids with a manifest (a candidate without one is incomplete and ignored)."""
        keys = self._list(self.key("candidates") + "/")
        return sorted(k.split("/")[-2] for k in keys if k.endswith("/" + MANIFEST_FILE))

    def list_versions(self) -> list[str]:
        """Every vN ever claimed, in order (claimed but unfinished ones included: never reused)."""
        names = {k[len(self.key("drafts")) + 1 :].split("/")[0] for k in self._list(self.key("drafts") + "/")}
        numbers = sorted(int(m.group(1)) for n in names if (m := _VERSION_RE.match(n)))
        return [f"v{n}" for n in numbers]

    def promoted(self) -> tuple[PromotedPointer | None, str | None]:
        """The pointer and its ETag (None, None when nothing was ever promoted)."""
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=self.key(POINTER_FILE))
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise RegistryError(f"reading {self.key(POINTER_FILE)}: {e}") from e
        return PromotedPointer.model_validate_json(obj["Body"].read()), obj["ETag"]

    def history(self) -> list[HistoryEntry]:
        keys = sorted(self._list(self.key("history") + "/"))
        return [HistoryEntry.model_validate_json(self._get(k)) for k in keys]

    # -- promotion ------------------------------------------------------------------------------
    def promote(
        self,
        run_id: str,
        *,
        target_revision: str,
        tokenizer_hash: str | None,
        now: datetime,
        reason: str = "",
    ) -> PromotedPointer:
        """Verify candidate run_id, copy it to the next drafts/vN/ and flip the pointer to it.

        Idempotent per run: if the pointer already names run_id's promotion (a retry after the flip
        succeeded but the caller did not learn it), that pointer is returned and nothing is copied.
        """
        pointer, etag = self.promoted()
        if pointer is not None and pointer.run_id == run_id and pointer.target_revision == target_revision:
            return pointer
        manifest = self.candidate_manifest(run_id)
        _check_compatible(manifest, target_revision, tokenizer_hash, f"candidate {run_id}")
        # Every file is verified before vN is claimed: a mismatch writes nothing.
        etags = {name: self._verified_etag(run_id, name, entry) for name, entry in manifest.files.items()}
        version = self._claim_next_version()
        self._copy_draft(run_id, version, manifest.files, etags)
        stamp = _iso(now)
        draft = manifest.model_copy(update={"kind": "draft", "version": version, "promoted_at": stamp})
        written = draft.model_dump_json(indent=2).encode()
        self._put(self.key("drafts", version, MANIFEST_FILE), written, IfNoneMatch="*")
        new = PromotedPointer(
            version=version,
            run_id=run_id,
            target_revision=target_revision,
            tokenizer_hash=tokenizer_hash,
            updated_at=stamp,
            manifest_sha256=hashlib.sha256(written).hexdigest(),
        )
        self._replace_pointer(new, etag)
        previous = pointer.version if pointer else None
        self._record(
            HistoryEntry(action="promote", at=stamp, version=version, previous=previous, run_id=run_id, reason=reason),
            now,
        )
        return new

    def roll_back(self, version: str, *, target_revision: str, now: datetime, reason: str,
                  manual: bool = False) -> PromotedPointer:
        """Point back at an earlier promoted version (a pointer flip: no file moves)."""
        return self.point_to(version, target_revision=target_revision, now=now, reason=reason, action="rollback",
                             manual=manual)

    def point_to(self, version: str, *, target_revision: str, now: datetime, reason: str, action: str,
                 manual: bool = False) -> PromotedPointer:
        """Flip the pointer to an already promoted drafts/vN (a rollback, or a promotion by hand).

        The draft's manifest is checked against the target revision and its checksum goes into the
        pointer, as at promotion, so pods verify what they fetch. Raises UnknownVersion when vN was
        never promoted. Conditional on the pointer read first: a concurrent flip loses, never both.
        """
        if not _VERSION_RE.match(version):
            raise UnknownVersion(f"{version!r} is not a draft version like v3")
        pointer, etag = self.promoted()
        try:
            written = self.client.get_object(Bucket=self.bucket, Key=self.key("drafts", version, MANIFEST_FILE))
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                raise UnknownVersion(f"{version} was never promoted (no {self.key('drafts', version)}/)") from e
            raise RegistryError(f"reading {self.key('drafts', version, MANIFEST_FILE)}: {e}") from e
        raw = bytes(written["Body"].read())
        manifest = Manifest.model_validate_json(raw)
        _check_compatible(manifest, target_revision, None, f"draft {version}")
        new = PromotedPointer(
            version=version,
            run_id=manifest.run_id,
            target_revision=target_revision,
            tokenizer_hash=manifest.tokenizer_hash,
            updated_at=_iso(now),
            manifest_sha256=hashlib.sha256(raw).hexdigest(),
        )
        self._replace_pointer(new, etag)
        self._record(
            HistoryEntry(action=action, at=new.updated_at, version=version, run_id=manifest.run_id,
                         previous=pointer.version if pointer else None, reason=reason, manual=manual),
            now,
        )
        return new

    def previous_version(self) -> str | None:
        """The version the pointer named before its last flip (what a rollback goes back to), if any."""
        pointer, _ = self.promoted()
        flips = [e for e in self.history() if e.action in ("promote", "rollback")]
        if pointer is None or not flips or flips[-1].version != pointer.version:
            return None  # the pointer moved outside the history: nothing to trust
        return flips[-1].previous

    def record_rejection(self, run_id: str, *, now: datetime, reason: str) -> None:
        """A canary that did not promote: the pointer stays, the history says why."""
        pointer, _ = self.promoted()
        version = pointer.version if pointer else None
        self._record(
            HistoryEntry(
                action="reject", at=_iso(now), version=version, previous=version, run_id=run_id, reason=reason
            ),
            now,
        )

    def _verified_etag(self, run_id: str, name: str, entry: FileEntry) -> str:
        """Hash the candidate file from a streaming read; refuse on any mismatch, else its ETag."""
        key = self.key("candidates", run_id, name)
        try:
            seen = stream_sha256(self.client, self.bucket, key)
        except ClientError as e:
            raise RegistryError(f"reading {key}: {e}") from e
        if seen.sha256 != entry.sha256 or seen.bytes != entry.bytes:
            raise ChecksumMismatch(
                f"{key}: sha256 {seen.sha256} ({seen.bytes} bytes) does not match the "
                f"manifest's {entry.sha256} ({entry.bytes} bytes); not promoting"
            )
        return seen.etag

    def _copy_draft(self, run_id: str, version: str, files: Mapping[str, FileEntry], etags: Mapping[str, str]) -> None:
        """Copy the verified files to drafts/vN/ inside S3; a copy that fails midway removes what it wrote.

        Each copy is pinned to the ETag its verification read (a replaced candidate fails the copy).
        The failing file's key is removed too (S3 may have finished a copy whose answer was lost).
        The .claim stays, so vN is never reused; removal is best effort (S3 may be what failed),
        and a drafts/vN/ without manifest.json is never pointed at either way.
        """
        written: list[str] = []
        try:
            for name, entry in files.items():
                source, destination = self.key("candidates", run_id, name), self.key("drafts", version, name)
                written.append(destination)  # vN is ours (claimed), so removing this key loses nothing
                try:
                    server_side_copy(self.client, self.bucket, source, destination, size=entry.bytes,
                                     etag=etags[name], sse=self._sse, threshold=self.multipart_copy_threshold)
                except ClientError as e:
                    raise RegistryError(f"copying {source} to {destination}: {e}") from e
        except (RegistryError, BotoCoreError):
            # Best effort, and only under drafts/vN/ (prefix_delete checks every key).
            with contextlib.suppress(ClientError, BotoCoreError, DeletionRefused):
                delete_under_prefix(self.client, self.bucket, self.key("drafts", version) + "/", written)
            raise

    def _claim_next_version(self) -> str:
        existing = self.list_versions()
        version = f"v{int(existing[-1][1:]) + 1}" if existing else "v1"
        try:
            self._put(self.key("drafts", version, CLAIM_FILE), b"", IfNoneMatch="*")
        except PointerConflict as e:
            raise PointerConflict(f"{version} was claimed by another promotion; retry") from e
        return version

    def _replace_pointer(self, pointer: PromotedPointer, etag: str | None) -> None:
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        self._put(self.key(POINTER_FILE), pointer.model_dump_json(indent=2).encode(), **condition)

    def _record(self, entry: HistoryEntry, now: datetime) -> None:
        """history/<seq>-<time>-<action>.json, created only if absent: order is the sequence number."""
        for _ in range(5):  # a concurrent writer took our sequence number: count again
            seq = len(self._list(self.key("history") + "/")) + 1
            name = f"{seq:08d}-{now.strftime('%Y%m%dT%H%M%SZ')}-{entry.action}.json"
            try:
                self._put(self.key("history", name), entry.model_dump_json().encode(), IfNoneMatch="*")
            except PointerConflict:
                continue
            return
        raise RegistryError("could not append to history/ after 5 attempts")

    # -- the draft pool's index (pool.json) ------------------------------------------------------
    def pool(self) -> tuple[DraftPool | None, str | None]:
        """pool.json and its ETag (None, None before the first write).

        An index this version cannot read is an error, never replaced: it may be a newer operator's.
        """
        key = self.key(POOL_FILE)
        try:
            obj = self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as e:
            if _code(e) in ("NoSuchKey", "404", "NotFound"):
                return None, None
            raise RegistryError(f"reading {key}: {e}") from e
        try:
            return DraftPool.model_validate_json(obj["Body"].read()), obj["ETag"]
        except ValidationError as e:
            raise RegistryError(f"{key} is not a draft pool index of pool_version {POOL_VERSION}; "
                                f"left as it is: {e}") from e

    def replace_pool(self, pool: DraftPool, etag: str | None) -> None:
        """Compare-and-swap: If-Match the ETag read, or If-None-Match: * when there was none. A lost race
        (412, 409, or the object deleted since: 404) raises PoolConflict and writes nothing."""
        key = self.key(POOL_FILE)
        condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            self._put(key, pool.model_dump_json(indent=2).encode(), ContentType="application/json", **condition)
        except PointerConflict as e:
            raise PoolConflict(f"{key} changed since it was read; read it again and retry: {e}") from e
        except RegistryError as e:
            if isinstance(e.__cause__, ClientError) and _code(e.__cause__) in ("NoSuchKey", "404"):
                raise PoolConflict(f"{key} was deleted since it was read; read it again and retry") from e
            raise

    def record_served(self, version: str, *, target_revision: str, tokenizer_hash: str | None, now: datetime,
                      signature: DomainSignature | None = None, max_drafts: int = DEFAULT_MAX_DRAFTS,
                      pinned: Collection[str] = (), attempts: int = 3) -> list[str]:
        """``version`` serves from ``now``: added to (or touched in) the pool of this target, which is
        trimmed to ``max_drafts`` (draft_pool.served). Returns the versions that left the index; their
        drafts/vN stay. A lost race is read again and retried; PoolConflict after ``attempts``."""
        for _ in range(attempts):
            current, etag = self.pool()
            pool = for_target(current, target_revision, tokenizer_hash)  # another target: a new, empty pool
            updated, left = served(pool, version, now.timestamp(), signature, max_drafts=max_drafts,
                                   pinned=pinned)
            try:
                self.replace_pool(updated, etag)
            except PoolConflict:
                continue
            return left
        raise PoolConflict(f"{self.key(POOL_FILE)}: lost {attempts} races to concurrent writers; retry later")

    # -- captures -------------------------------------------------------------------------------
    def put_capture(self, name: str, data: bytes, samples: int) -> str:
        key = self.key("captures", name)
        self._put(key, data, Metadata={CAPTURE_SAMPLES_METADATA: str(samples)})
        return key

    def list_captures(self) -> list[CaptureObject]:
        """Oldest first. Objects without the samples metadata count as one sample.

        The count lives in each object's metadata, which a listing does not return: one HEAD per
        object not yet in ``sample_cache``.
        """
        out = []
        for obj in self._list_objects(self.key("captures") + "/"):
            etag = str(obj.get("ETag", ""))
            samples = self.sample_cache.get(obj["Key"], etag)
            if samples is None:
                head = self.client.head_object(Bucket=self.bucket, Key=obj["Key"])
                samples = int(head.get("Metadata", {}).get(CAPTURE_SAMPLES_METADATA, "1"))
                self.sample_cache.put(obj["Key"], etag, samples)
            out.append(CaptureObject(obj["Key"], obj["Size"], obj["LastModified"].timestamp(), samples))
        return sorted(out, key=lambda c: (c.last_modified, c.key))

    def prune_captures(
        self, limits: CaptureLimits, now: datetime, captures: list[CaptureObject] | None = None
    ) -> list[str]:
        """Delete the oldest captures beyond retention or the caps; returns the deleted keys.

        ``captures``: a listing the caller already made this pass (list_captures costs a HEAD per
        object); every key must lie under this registry's captures/ or nothing is deleted.
        """
        listed = self.list_captures() if captures is None else captures
        doomed = captures_to_prune(listed, limits, now.timestamp())
        if not doomed:
            return []
        try:
            outcome = delete_under_prefix(self.client, self.bucket, self.key("captures") + "/", doomed)
        except DeletionRefused as e:
            raise RegistryError(f"refusing to prune outside {self.key('captures')}/: {e}") from e
        except ClientError as e:
            raise RegistryError(f"pruning {self.key('captures')}/: {e}") from e
        if outcome.failed:  # never counted as deleted: the caller retries on a later pass
            raise PruneIncomplete(outcome.deleted, f"{len(outcome.deleted)} captures deleted, "
                                  f"{len(outcome.failed)} not: {outcome.describe_failures()}")
        return list(outcome.deleted)

    # -- capture claims (a running trainer's hold on the shards it reads) ------------------------
    def claim_key(self, run_id: str) -> str:
        if not _RUN_ID_RE.match(run_id):
            raise RegistryError(f"claim: run id {run_id!r} does not match {_RUN_ID_RE.pattern}")
        return self.key("claims", f"{run_id}.json")

    def put_claim(self, run_id: str, shards: list[CaptureObject], *, created_at: float, expires_at: float) -> str:
        """Write ``claims/<run id>.json`` listing ``shards`` (every key under captures/); returns its key.

        Written once (If-None-Match): a retried launch keeps the claim its trainer may already have
        read; PointerConflict when it exists.
        """
        outside = [c.key for c in shards if not c.key.startswith(self.key("captures") + "/")]
        if outside:
            raise RegistryError(f"refusing to claim outside {self.key('captures')}/: {outside[:3]}")
        body = {"claim_version": CLAIM_VERSION, "run_id": run_id, "created_at": created_at,
                "expires_at": expires_at,
                "shards": [{"key": c.key, "last_modified": c.last_modified, "size": c.size} for c in shards]}
        key = self.claim_key(run_id)
        self._put(key, json.dumps(body).encode(), ContentType="application/json", IfNoneMatch="*")
        return key

    def list_claims(self) -> list[dict[str, Any]]:
        """Every claim object's body (unreadable ones are skipped: they protect nothing)."""
        out = []
        for key in self._list(self.key("claims") + "/"):
            try:
                body = json.loads(self._get(key))
            except (RegistryError, ValueError):
                continue
            if isinstance(body, dict) and key == self.key("claims", f"{body.get('run_id')}.json"):
                out.append(body)
        return out

    def release_claim(self, run_id: str) -> None:
        """Delete the claim of ``run_id`` (absent is fine: S3 deletes are idempotent)."""
        self._delete_under(self.key("claims") + "/", [self.claim_key(run_id)])

    def _delete_under(self, prefix: str, keys: list[str]) -> tuple[str, ...]:
        if not keys:
            return ()
        try:
            outcome = delete_under_prefix(self.client, self.bucket, prefix, keys)
        except DeletionRefused as e:
            raise RegistryError(str(e)) from e
        except ClientError as e:
            raise RegistryError(f"deleting under {prefix}: {e}") from e
        if outcome.failed:
            raise PruneIncomplete(outcome.deleted, f"{len(outcome.deleted)} objects under {prefix} deleted, "
                                  f"{len(outcome.failed)} not: {outcome.describe_failures()}")
        return outcome.deleted

    # -- S3 primitives --------------------------------------------------------------------------
    def _put(self, key: str, body: bytes, **extra: Any) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=body, **self._sse, **extra)
        except ClientError as e:
            if _code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                raise PointerConflict(f"{key} changed concurrently (conditional write lost): {e}") from e
            raise RegistryError(f"writing {key}: {e}") from e

    def _get(self, key: str) -> bytes:
        try:
            return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as e:
            raise RegistryError(f"reading {key}: {e}") from e

    def _list_objects(self, prefix: str) -> list[Mapping[str, Any]]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [obj for page in pages for obj in page.get("Contents", [])]

    def _list(self, prefix: str) -> list[str]:
        return [obj["Key"] for obj in self._list_objects(prefix)]


def captures_to_prune(captures: list[CaptureObject], limits: CaptureLimits, now: float) -> list[str]:
    """Oldest first: drop what is past retention, then whatever keeps the buffer above a cap."""
    ordered = sorted(captures, key=lambda c: (c.last_modified, c.key))
    samples, size = sum(c.samples for c in ordered), sum(c.size for c in ordered)
    doomed = []
    for c in ordered:
        expired = now - c.last_modified > limits.retention_s
        if not (expired or samples > limits.max_samples or size > limits.max_bytes):
            break
        doomed.append(c.key)
        samples, size = samples - c.samples, size - c.size
    return doomed


def _check_compatible(manifest: Manifest, target_revision: str, tokenizer_hash: str | None, what: str) -> None:
    if manifest.target_revision != target_revision:
        raise IncompatibleDraft(f"{what}: target_revision {manifest.target_revision!r} != {target_revision!r}")
    if tokenizer_hash is not None and manifest.tokenizer_hash != tokenizer_hash:
        raise IncompatibleDraft(f"{what}: tokenizer_hash {manifest.tokenizer_hash!r} != {tokenizer_hash!r}")


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _iso(now: datetime) -> str:
    return now.astimezone(UTC).isoformat()


def manifest_json(manifest: Manifest) -> str:
    """Serialise a manifest exactly as the registry stores it."""
    return json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n"
