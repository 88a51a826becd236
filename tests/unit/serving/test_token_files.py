"""The control token a pod accepts: re-read when the mounted Secret changes (serving contract v1)."""

from __future__ import annotations

import os
from pathlib import Path

from tide_contracts.control_token import ControlTokens


def _swap(volume: Path, data: dict[str, str], generation: int) -> None:
    """What the kubelet does to a Secret volume: a new timestamped dir, then one atomic symlink swap."""
    target = volume / f"..{generation}"
    target.mkdir()
    for key, value in data.items():
        (target / key).write_text(value)
    (volume / "..data_tmp").symlink_to(target.name)
    os.replace(volume / "..data_tmp", volume / "..data")
    for key in data:
        if not (volume / key).is_symlink():
            (volume / key).symlink_to(f"..data/{key}")


def test_the_token_follows_an_atomic_secret_volume_update(tmp_path: Path) -> None:
    _swap(tmp_path, {"token": "one"}, 1)
    tokens = ControlTokens(tmp_path / "token")
    assert tokens.accepted() == ("one",)
    _swap(tmp_path, {"token": "two", "previous-token": "one"}, 2)
    assert tokens.accepted() == ("two", "one")
    _swap(tmp_path, {"token": "two"}, 3)
    assert tokens.accepted() == ("two",)  # the previous token's file is a dangling link now


def test_a_missing_file_means_unconfigured_and_the_environment_is_the_fallback(tmp_path: Path) -> None:
    assert not ControlTokens(tmp_path / "token").configured
    assert ControlTokens.from_environment({"TIDE_CONTROL_TOKEN": "env"}).accepted() == ("env",)
    named = {"TIDE_CONTROL_TOKEN_FILE": str(tmp_path / "token"), "TIDE_CONTROL_TOKEN": "env"}
    assert ControlTokens.from_environment(named).accepted() == ()  # a named file is the only source
    (tmp_path / "token").write_text("file\n")
    assert ControlTokens.from_environment(named).accepted() == ("file",)
