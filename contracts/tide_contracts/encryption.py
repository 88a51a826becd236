"""Server-side encryption of every S3 write: one settings object for the operator, the pods and the trainer.

The operator derives it from ``spec.control.capture.serverSideEncryption``/``kmsKeyId`` and hands it
to its own registry and, as two environment variables, to the serving pods (captures) and the
trainer Jobs (candidates), so nothing a TideDeployment stores goes out unencrypted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SSE_ENV = "TIDE_S3_SSE"
"""``AES256`` or ``aws:kms``; unset or empty: no encryption header (the bucket's default applies)."""
SSE_KMS_KEY_ID_ENV = "TIDE_S3_SSE_KMS_KEY_ID"
"""The KMS key of ``aws:kms``; unset: the account's default key for S3."""
ALGORITHMS = ("AES256", "aws:kms")


class EncryptionSettingsError(ValueError):
    """The encryption settings are not ones S3 accepts (the message names the variable)."""


@dataclass(frozen=True)
class S3Encryption:
    algorithm: str | None = None  # None: no header (the bucket's default encryption, if any)
    kms_key_id: str | None = None

    def __post_init__(self) -> None:
        if self.algorithm is not None and self.algorithm not in ALGORITHMS:
            raise EncryptionSettingsError(f"{SSE_ENV}={self.algorithm!r}: must be one of {', '.join(ALGORITHMS)}")
        if self.kms_key_id and self.algorithm != "aws:kms":
            raise EncryptionSettingsError(f"{SSE_KMS_KEY_ID_ENV} needs {SSE_ENV}=aws:kms")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> S3Encryption:
        return cls(environ.get(SSE_ENV) or None, environ.get(SSE_KMS_KEY_ID_ENV) or None)

    def put_args(self) -> dict[str, Any]:
        """Keyword arguments of put_object, copy_object, create_multipart_upload (and upload_file's ExtraArgs)."""
        args: dict[str, Any] = {}
        if self.algorithm:
            args["ServerSideEncryption"] = self.algorithm
        if self.kms_key_id:
            args["SSEKMSKeyId"] = self.kms_key_id
        return args

    def env(self) -> dict[str, str]:
        """The variables that carry these settings into a pod (only the ones set)."""
        env = {SSE_ENV: self.algorithm} if self.algorithm else {}
        if self.kms_key_id:
            env[SSE_KMS_KEY_ID_ENV] = self.kms_key_id
        return env
