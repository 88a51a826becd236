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
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tide_contracts.draft_copy import DEFAULT_MULTIPART_COPY_THRESHOLD, server_side_copy, stream_sha256
from tide_contracts.draft_pool import DomainSignature
from tide_contracts.encryption import S3Encryption
from tide_contracts.prefix_delete import DeletionRefused, delete_under_prefix
from tide_contracts.recall import RECALL_REPORT_FILE, RECALL_REPORT_VERSION, RecallReport
from tide_contracts.registry_captures import (
    _RUN_ID_RE,
    CAPTURE_SAMPLES_METADATA,
    CAPTURE_SIGNATURE_METADATA,
    CLAIM_VERSION,
    CaptureBuffer,
    CaptureLimits,
    CaptureObject,
    CaptureSampleCache,
    capture_metadata,
    captures_to_prune,
)
from tide_contracts.registry_pool import PoolCache, PoolConflict, PoolIndex
from tide_contracts.registry_store import PointerConflict, PruneIncomplete, RegistryError, _code

CONTRACT_VERSION = 1
MANIFEST_FILE = "manifest.json"
POINTER_FILE = "promoted.json"
LAUNCH_DRAFT = "initial"  # the launch draft's version (spec.draft.initial), as pods and the draft pool name it
CLAIM_FILE = ".claim"  # created with If-None-Match: * to reserve a vN before any file is copied
_VERSION_RE = re.compile(r"^v([1-9][0-9]*)$")

# The registry's whole public API, its parts (registry_captures, registry_pool, registry_store) included.
__all__ = [
    "CAPTURE_SAMPLES_METADATA",
    "CAPTURE_SIGNATURE_METADATA",
    "CLAIM_FILE",
    "CLAIM_VERSION",
    "CONTRACT_VERSION",
    "LAUNCH_DRAFT",
    "MANIFEST_FILE",
    "POINTER_FILE",
    "CaptureLimits",
    "CaptureObject",
    "CaptureSampleCache",
    "ChecksumMismatch",
    "DraftRegistry",
    "FileEntry",
    "HistoryEntry",
    "IncompatibleDraft",
    "Manifest",
    "PointerConflict",
    "PoolConflict",
    "PromotedPointer",
    "PruneIncomplete",
    "RegistryError",
    "UnknownVersion",
    "capture_metadata",
    "captures_to_prune",
    "manifest_json",
]


class ChecksumMismatch(RegistryError):
    pass


class IncompatibleDraft(RegistryError):
    """The draft is pinned to another target revision or tokenizer."""


class UnknownVersion(RegistryError):
    """No promoted draft of that version exists (a pointer flip to it is refused)."""


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
    # A vN, or the launch draft (LAUNCH_DRAFT) once the pool recalled it or a user flipped back to it:
    # pods then serve what they launched with (spec.draft.initial), and nothing is fetched or checked.
    version: str = Field(pattern=r"^(initial|v[1-9][0-9]*)$")
    run_id: str
    target_revision: str
    tokenizer_hash: str | None = None
    updated_at: str
    # sha256 of drafts/<version>/manifest.json as the operator wrote it: pods check the manifest they
    # fetch against it (DraftLoadRequest.manifest_sha256). None in pointers written before it existed.
    manifest_sha256: str | None = None


class HistoryEntry(_Frozen):
    # recalled: the pointer flipped back to a pooled vN that won a recall evaluation (issue 16, no copy)
    action: str = Field(pattern=r"^(promote|rollback|reject|recalled)$")
    at: str
    version: str | None = None  # the version the pointer names afterwards
    previous: str | None = None  # the version it named before
    run_id: str | None = None
    reason: str = ""
    manual: bool = False  # a user asked for it (tide promote / tide rollback), not the loop


class DraftRegistry(PoolIndex, CaptureBuffer):
    """All registry I/O over one boto3 S3 client (the only module here that talks to S3).

    The pool's index (registry_pool) and the capture buffer (registry_captures) are mixed in; the S3
    primitives they share live in registry_store.
    """

    def __init__(
        self, client: Any, bucket: str, prefix: str, *, sse: str | None = None, kms_key_id: str | None = None,
        sample_cache: CaptureSampleCache | None = None, pool_cache: PoolCache | None = None,
        multipart_copy_threshold: int = DEFAULT_MULTIPART_COPY_THRESHOLD,
    ) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")
        self.multipart_copy_threshold = multipart_copy_threshold  # bytes; larger files copy in parts
        # A caller that lists captures (reads pool.json) every pass keeps one cache across registries and passes.
        self.sample_cache = sample_cache if sample_cache is not None else CaptureSampleCache()
        self.pool_cache = pool_cache
        # Every write of this registry carries it (put, upload, copy): encryption.put_args().
        self.encryption = S3Encryption(sse, kms_key_id)
        self._sse: dict[str, str] = self.encryption.put_args()

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
        body = self._get_if_present(key)
        if body is None:
            return None
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
        if version == LAUNCH_DRAFT:
            return self._point_to_launch_draft(target_revision=target_revision, now=now, reason=reason,
                                               action=action, manual=manual)
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

    def _point_to_launch_draft(self, *, target_revision: str, now: datetime, reason: str, action: str,
                               manual: bool) -> PromotedPointer:
        """The pointer back to the launch draft: no drafts/ object exists for it (the spec names it, and
        the caller checked that it does), so there is no manifest to check or checksum to pin."""
        pointer, etag = self.promoted()
        new = PromotedPointer(version=LAUNCH_DRAFT, run_id=LAUNCH_DRAFT, target_revision=target_revision,
                              updated_at=_iso(now))
        self._replace_pointer(new, etag)
        self._record(
            HistoryEntry(action=action, at=new.updated_at, version=LAUNCH_DRAFT, run_id=LAUNCH_DRAFT,
                         previous=pointer.version if pointer else None, reason=reason, manual=manual),
            now,
        )
        return new

    def previous_version(self) -> str | None:
        """The version the pointer named before its last flip (what a rollback goes back to), if any."""
        pointer, _ = self.promoted()
        flips = [e for e in self.history() if e.action in ("promote", "rollback", "recalled")]
        if pointer is None or not flips or flips[-1].version != pointer.version:
            return None  # the pointer moved outside the history: nothing to trust
        # No pointer before the flip: the pods served the launch draft, which the pointer can name now
        # (whoever flips back checks that the spec still names one).
        return flips[-1].previous or LAUNCH_DRAFT

    def record_rejection(self, run_id: str, *, now: datetime, reason: str) -> None:
        """A canary that did not promote: the pointer stays, the history says why.

        ``run_id`` names the candidate: a run's, or a pooled version (vN, initial) a recall put on the
        canary, which is no run: the entry then names no run and its reason says which draft it was."""
        pointer, _ = self.promoted()
        version = pointer.version if pointer else None
        recalled = run_id == LAUNCH_DRAFT or _VERSION_RE.match(run_id) is not None
        self._record(
            HistoryEntry(action="reject", at=_iso(now), version=version, previous=version,
                         run_id=None if recalled else run_id, reason=f"recalled {run_id}: {reason}" if recalled
                         else reason),
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

def _check_compatible(manifest: Manifest, target_revision: str, tokenizer_hash: str | None, what: str) -> None:
    if manifest.target_revision != target_revision:
        raise IncompatibleDraft(f"{what}: target_revision {manifest.target_revision!r} != {target_revision!r}")
    if tokenizer_hash is not None and manifest.tokenizer_hash != tokenizer_hash:
        raise IncompatibleDraft(f"{what}: tokenizer_hash {manifest.tokenizer_hash!r} != {tokenizer_hash!r}")


def _iso(now: datetime) -> str:
    return now.astimezone(UTC).isoformat()


def manifest_json(manifest: Manifest) -> str:
    """Serialise a manifest exactly as the registry stores it."""
    return json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n"
