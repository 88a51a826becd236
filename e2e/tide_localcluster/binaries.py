"""Find (or build once) the control-plane binaries; say exactly what is missing and how to fix it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tide_localcluster.paths import BUILD_SCRIPT, KUBE_VERSION, kube_bin_dir

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


class MissingDependencyError(RuntimeError):
    """A binary the plane needs is absent; the message says how to install it."""


def kube_binary(name: str) -> Path:
    path = kube_bin_dir() / name
    if not path.is_file():
        raise MissingDependencyError(
            f"{name} v{KUBE_VERSION} is not built: run `python -m tide_localcluster build` "
            f"(builds from Debian's kubernetes source package into {kube_bin_dir()})"
        )
    return path


def system_binary(name: str, debian_package: str) -> Path:
    found = shutil.which(name)
    if found is None:
        raise MissingDependencyError(f"{name} not found on PATH: install it with `apt-get install {debian_package}`")
    return Path(found)


def ensure_built() -> Path:
    """Build the binaries when any is missing; a no-op on a warm cache."""
    if all((kube_bin_dir() / c).is_file() for c in COMPONENTS):
        return kube_bin_dir()
    if not BUILD_SCRIPT.is_file():
        raise MissingDependencyError(f"build script {BUILD_SCRIPT} is missing from the checkout")
    subprocess.run(["bash", str(BUILD_SCRIPT)], check=True)
    for c in COMPONENTS:
        kube_binary(c)
    return kube_bin_dir()
