"""Secret and ConfigMap volumes on the process kubelet: files kept current, mounts as path rewrites.

Pods here are processes on the host, so nothing is mounted: a volume's files live in the pod's
directory and every env value and argument that names a path under a container's mountPath is
rewritten to that directory. The files are written the way the kubelet's AtomicWriter does (a new
timestamped directory, then one symlink swap of `..data`), so a reader never sees half an update
and a program that re-reads on change behaves as it would in a real pod.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tide_localcluster.podenv import ContainerConfigError, ObjectLookup

SOURCES = {"secret": ("Secret", "secretName"), "configMap": ("ConfigMap", "name")}


def projected_files(volume: Mapping[str, Any], lookup: ObjectLookup, namespace: str) -> dict[str, str] | None:
    """The files of a secret/configMap volume (relative path -> content); None for other volume types."""
    source_type = next((t for t in SOURCES if t in volume), None)
    if source_type is None:
        return None
    source = volume[source_type]
    kind, name_field = SOURCES[source_type]
    data = lookup(namespace, source[name_field])
    if data is None:
        if source.get("optional"):
            return {}
        raise ContainerConfigError(f"volume {volume['name']}: {kind} {namespace}/{source[name_field]} not found")
    items = source.get("items")
    if not items:
        return dict(data)
    missing = [i["key"] for i in items if i["key"] not in data]
    if missing and not source.get("optional"):
        raise ContainerConfigError(f"volume {volume['name']}: keys {missing} not in {kind} {source[name_field]}")
    return {i["path"]: data[i["key"]] for i in items if i["key"] in data}


def file_mode(volume: Mapping[str, Any]) -> int:
    source_type = next((t for t in SOURCES if t in volume), None)
    return int(volume[source_type].get("defaultMode", 0o644)) if source_type else 0o644


def write_atomically(volume_dir: Path, files: Mapping[str, str], mode: int = 0o644) -> bool:
    """Make volume_dir show exactly ``files``; True when something changed."""
    data = volume_dir / "..data"
    if data.exists() and _current(volume_dir, files.keys()) == dict(files):
        return False
    volume_dir.mkdir(parents=True, exist_ok=True)
    generation = volume_dir / f"..{os.urandom(6).hex()}"
    generation.mkdir()
    for path, content in files.items():
        (generation / path).parent.mkdir(parents=True, exist_ok=True)
        (generation / path).write_text(content)
        (generation / path).chmod(mode)
    old = os.readlink(data) if data.is_symlink() else None
    (volume_dir / "..data_tmp").symlink_to(generation.name)
    os.replace(volume_dir / "..data_tmp", data)
    _link_top_level(volume_dir, files.keys())
    if old:
        shutil.rmtree(volume_dir / old, ignore_errors=True)
    return True


def _current(volume_dir: Path, keys: Any) -> dict[str, str]:
    top = {p.name for p in volume_dir.iterdir() if not p.name.startswith("..")}
    if top != {k.split("/")[0] for k in keys}:
        return {}
    try:
        return {k: (volume_dir / "..data" / k).read_text() for k in keys}
    except OSError:
        return {}


def _link_top_level(volume_dir: Path, keys: Any) -> None:
    wanted = {k.split("/")[0] for k in keys}
    for entry in volume_dir.iterdir():
        if not entry.name.startswith("..") and entry.name not in wanted:
            entry.unlink()  # a key removed from the Secret disappears from the volume, as in a pod
    for name in wanted:
        if not (volume_dir / name).is_symlink():
            (volume_dir / name).symlink_to(f"..data/{name}")


def mounts(container: Mapping[str, Any], volume_dirs: Mapping[str, Path]) -> list[tuple[str, str]]:
    """(mountPath, host directory) of the container's mounts that have files here, longest path first."""
    found = [(m["mountPath"].rstrip("/"), str(volume_dirs[m["name"]] / m.get("subPath", "")).rstrip("/"))
             for m in container.get("volumeMounts", []) if m["name"] in volume_dirs]
    return sorted(found, key=lambda pair: -len(pair[0]))


def rewrite(value: str, container_mounts: list[tuple[str, str]]) -> str:
    """A path at or under a mountPath, moved to where the files are on this host."""
    for mount_path, host_dir in container_mounts:
        if value == mount_path or value.startswith(mount_path + "/"):
            return host_dir + value[len(mount_path):]
    return value
