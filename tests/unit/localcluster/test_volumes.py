"""Secret/ConfigMap volumes on the process kubelet: projection, atomic updates, mount paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from tide_localcluster.podenv import ContainerConfigError
from tide_localcluster.volumes import mounts, projected_files, rewrite, write_atomically

SECRETS = {("ns", "tok"): {"token": "a", "previous-token": "b"}}


def lookup(namespace: str, name: str) -> dict[str, str] | None:
    return SECRETS.get((namespace, name))


def test_a_secret_volume_projects_every_key_or_the_listed_items() -> None:
    assert projected_files({"name": "v", "secret": {"secretName": "tok"}}, lookup, "ns") == SECRETS[("ns", "tok")]
    items = {"name": "v", "secret": {"secretName": "tok", "items": [{"key": "token", "path": "t/now"}]}}
    assert projected_files(items, lookup, "ns") == {"t/now": "a"}
    assert projected_files({"name": "v", "emptyDir": {}}, lookup, "ns") is None


def test_a_missing_secret_waits_unless_optional() -> None:
    with pytest.raises(ContainerConfigError, match="Secret ns/gone not found"):
        projected_files({"name": "v", "secret": {"secretName": "gone"}}, lookup, "ns")
    assert projected_files({"name": "v", "secret": {"secretName": "gone", "optional": True}}, lookup, "ns") == {}
    with pytest.raises(ContainerConfigError, match="keys \\['nope'\\]"):
        projected_files({"name": "v", "secret": {"secretName": "tok", "items": [{"key": "nope", "path": "x"}]}},
                        lookup, "ns")


def test_updates_swap_the_files_atomically_and_drop_removed_keys(tmp_path: Path) -> None:
    volume = tmp_path / "v"
    assert write_atomically(volume, {"token": "a", "previous-token": "b"}, 0o440)
    first = (volume / "token").resolve()
    assert ((volume / "token").read_text(), (volume / "previous-token").read_text()) == ("a", "b")
    assert first.stat().st_mode & 0o777 == 0o440
    assert not write_atomically(volume, {"token": "a", "previous-token": "b"})  # unchanged: nothing written
    assert write_atomically(volume, {"token": "c"})
    assert (volume / "token").read_text() == "c"
    assert not (volume / "previous-token").exists()
    assert not first.exists()  # the old generation is gone


def test_paths_under_a_mount_move_to_the_volume_directory(tmp_path: Path) -> None:
    container = {"volumeMounts": [{"name": "tok", "mountPath": "/var/run/tide/control"},
                                  {"name": "shm", "mountPath": "/dev/shm"}]}
    mounted = mounts(container, {"tok": tmp_path / "tok"})  # shm has no files here: left alone
    assert rewrite("/var/run/tide/control/token", mounted) == f"{tmp_path}/tok/token"
    assert rewrite("/var/run/tide/control", mounted) == f"{tmp_path}/tok"
    assert rewrite("/var/run/tide/controlled", mounted) == "/var/run/tide/controlled"
    assert rewrite("/dev/shm/x", mounted) == "/dev/shm/x"
