"""What S3 and the draft registry raise when storage fails: an effect's EffectError, a sensor's error reading."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from tide_contracts.registry import RegistryError

STORAGE_ERRORS = (RegistryError, ClientError, BotoCoreError, OSError)
