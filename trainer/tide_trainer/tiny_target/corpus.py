"""Two text domains that exist on every machine of this kind, pinned by sha256 so results reproduce.

Domain "code": sources of the Python 3.11.7 standard library the project's interpreter ships.
Domain "prose": the licence texts Debian's base-files package installs in /usr/share/common-licenses.
A file whose checksum differs is an error, not a silent change of the experiment.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

STDLIB = Path(sysconfig.get_paths()["stdlib"])
LICENSES = Path("/usr/share/common-licenses")

CODE_FILES = {
    "argparse.py": "dc1eba8adfdf615986421f981337458ba1072d3e718a0f76e3224940fd74118b",
    "bisect.py": "e5b2ff166f48a06e70ae831d8c9b47283fcd0c254306eee12d3dae9c55e11526",
    "collections/__init__.py": "303701de55e434c0fbcc478ae8a79a28537d9ebe83b3150508438ffd6e3e14c7",
    "dataclasses.py": "4b7e1c99ebea53b546317d218a0261895a1769f83a6b95dc0136f13578066a7f",
    "enum.py": "84fc683aa71da233cf0f6a1bd59ffedc2bc7adb3a40f9339052141176071b6d6",
    "functools.py": "6d80018a3fa9fed44c5b78f881987ee3ab3fb1238b077b4e6dcb4b76da7db73b",
    "heapq.py": "6d43277e5c76fc0f073cd388fcff852d14d068f6bb6d4886c340f8b75a1229a9",
    "inspect.py": "d55ac82f84e5c93953e9f5852ec255957e6c12f47d5cc0ea456447319da0f5af",
    "json/decoder.py": "9f02654649816145bc76f8c210a5fe3ba1de142d4d97a1c93105732e747c285b",
    "json/encoder.py": "7c358788fbb2a6a07f66f1f8446c52396f35fc201108f666d5be002d86f31af2",
    "pathlib.py": "3b21ac188fd9ac20bacc8ccd976fabd5d8ccf5000f8e157d3dfff005b228fb3d",
    "shutil.py": "d0dbfcd96ba06684aaf5d55e941aaaf36bb3a22cf537ea9d46317b363bcc5792",
    "subprocess.py": "2ff641d58f8696496e8718538cd96cd7afcd503ae271fb23da22422b3aee9fc7",
    "textwrap.py": "62867e40cdea6669b361f72af4d7daf0359f207c92cbeddfc7c7506397c1f31c",
    "typing.py": "115d96e966bf35cf97126f98dd1fa854a00dd832733fc01ede58cfd4fa490660",
}
PROSE_FILES = {
    "Apache-2.0": "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30",
    "Artistic": "b7fd9b73ea99602016a326e0b62e6646060d18febdd065ceca8bb482208c3d88",
    "BSD": "5d588eb3b157d52112afea935c88a7ff9efddc1e2d95a42c25d3b96ad9055008",
    "CC0-1.0": "a2010f343487d3f7618affe54f789f5487602331c0a8d03f49e9a7c547cf0499",
    "GFDL-1.2": "d8e94ae5fdb5433fcae2961aeb1a8cf17174d6f4a0465d24bf37dd8a038bd439",
    "GFDL-1.3": "110535522396708cea37c72a802c5e7e81391139f5f7985631c93ef242b206a4",
    "GPL-1": "d77d235e41d54594865151f4751e835c5a82322b0e87ace266567c3391a4b912",
    "GPL-2": "8177f97513213526df2cf6184d8ff986c675afb514d4e68a404010521b880643",
    "GPL-3": "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986",
    "LGPL-2": "681e386e44a19d7d0674b4320272c90e66b6610b741e7e6305f8219c42e85366",
    "LGPL-2.1": "dc626520dcd53a22f727af3ee42c770e56c97a64fe3adb063799d8ab032fe551",
    "LGPL-3": "e3a994d82e644b03a792a930f574002658412f62407f5fee083f2555c5f23118",
    "MPL-1.1": "f849fc26a7a99981611a3a370e83078deb617d12a45776d6c4cada4d338be469",
    "MPL-2.0": "fab3dd6bdab226f1c08630b1dd917e11fcb4ec5e1e020e2c16f83a0a13863e85",
}
HELD_OUT_SHARE = 0.1  # the tail of every file: prompts for capture and evaluation, never trained on


class CorpusError(RuntimeError):
    """A pinned corpus file is missing or changed."""


@dataclass(frozen=True)
class Domain:
    name: str
    root: Path
    files: dict[str, str]  # relative path -> sha256

    def texts(self) -> list[str]:
        out = []
        for rel, digest in self.files.items():
            path = self.root / rel
            if not path.is_file():
                raise CorpusError(f"{self.name} corpus: {path} is missing")
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                raise CorpusError(f"{self.name} corpus: {path} changed (sha256 != {digest})")
            out.append(data.decode("utf-8"))
        return out

    def split(self) -> tuple[list[str], list[str]]:
        """(train, held_out) by cutting each file at 90% of its length (on a line break)."""
        train, held_out = [], []
        for text in self.texts():
            cut = text.rfind("\n", 0, int(len(text) * (1 - HELD_OUT_SHARE))) + 1
            train.append(text[:cut])
            held_out.append(text[cut:])
        return train, held_out

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256("".join(sorted(self.files.values())).encode()).hexdigest()[:16]


CODE = Domain("code", STDLIB, CODE_FILES)
PROSE = Domain("prose", LICENSES, PROSE_FILES)
DOMAINS = {d.name: d for d in (CODE, PROSE)}
