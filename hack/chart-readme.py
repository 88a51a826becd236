#!/usr/bin/env python3
"""Write charts/tide-operator/README.md from the chart's values.yaml and Chart.yaml.

helm-docs conventions: a `# -- text` comment right above a key documents it (following `# ` lines
continue the text); `# -- (type) text` names the type; `# @default -- text` replaces the shown default
(otherwise a long list shows its length and item names). Every leaf value gets a row (Key, Type,
Default, Description), and so does a documented mapping, followed by its keys.

    python hack/chart-readme.py           # rewrite the README
    python hack/chart-readme.py --check   # exit 1 when the committed README differs

Values come from PyYAML (a dependency of the project's base install); only the `# --` comments are
read line by line, since YAML parsers drop comments.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART_DIR = Path(__file__).resolve().parents[1] / "charts" / "tide-operator"
README = CHART_DIR / "README.md"
KEY = re.compile(r"""^("[^"]*"|'[^']*'|[^\s\-?:,\[\]{}#&*!|>'"%@`][^:#]*?|-[^\s:][^:#]*?)\s*:(?:\s+|$)""")
INLINE_DEFAULT_MAX = 100  # longer defaults: a mapping's keys get rows, a list is summarised


@dataclass(frozen=True)
class Doc:
    description: str
    type_name: str | None = None  # from `# -- (type) text`
    default: str | None = None  # from `# @default -- text`


def documented(text: str) -> dict[tuple[str, ...], Doc]:
    """Key path -> its `# --` comment. Keys inside sequence items are not documented."""
    docs: dict[tuple[str, ...], Doc] = {}
    stack: list[tuple[int, str | None]] = []
    words: list[str] | None = None
    default: str | None = None
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped:
            words, default = None, None
        elif stripped.startswith("# --"):
            words = [stripped[4:].strip()]
        elif stripped.startswith("# @default --"):
            default = stripped.removeprefix("# @default --").strip()
        elif stripped.startswith("#"):
            if words is not None:
                words.append(stripped.lstrip("#").strip())
        else:
            indent = len(raw) - len(raw.lstrip(" "))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            match = KEY.match(stripped)
            key = None if stripped.startswith("-") or match is None else yaml.safe_load(match.group(1))
            stack.append((indent, key))
            path = tuple(key for _, key in stack)
            if words is not None and None not in path:
                docs[path] = _doc(" ".join(w for w in words if w), default)  # type: ignore[index]
            words, default = None, None
    return docs


def _doc(text: str, default: str | None) -> Doc:
    match = re.match(r"^\((\w+)\)\s*", text)
    if match:
        return Doc(text[match.end():], match.group(1), default)
    return Doc(text, None, default)


# ---- the README ------------------------------------------------------------------------------


def type_of(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", list: "list", dict: "object"}.get(type(value), "string")


def rows(values: dict[str, Any], docs: dict[tuple[str, ...], Doc], path: tuple[str, ...] = ()) -> list[str]:
    found = []
    for key, value in values.items():
        here = (*path, key)
        doc = docs.get(here)
        nested = isinstance(value, dict) and value
        if doc is not None or not nested:
            default = shown_default(value)
            if doc is not None and doc.default is not None:
                default = doc.default
            type_name = (doc.type_name if doc is not None else None) or type_of(value)
            found.append(_row(here, type_name, default, doc.description if doc is not None else ""))
        if nested:
            found += rows(value, docs, here)
    return found


def shown_default(value: Any) -> str:
    """Compact JSON; a long mapping's keys get rows of their own, a long list is summarised."""
    shown = json.dumps(value, separators=(",", ":"))
    if len(shown) <= INLINE_DEFAULT_MAX:
        return f"`{shown}`"
    if isinstance(value, dict):
        return "(keys below)"
    names = [item.get("name") for item in value if isinstance(item, dict)]
    listed = f": {', '.join(names)}" if names and all(isinstance(n, str) for n in names) else ""
    return f"{len(value)} entries{listed} (see values.yaml)"


def _row(path: tuple[str, ...], type_name: str, default: str, description: str) -> str:
    key = ".".join(f'"{k}"' if "." in k or "/" in k else k for k in path)
    cells = [key, type_name, default, description]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def readme(values_text: str, chart_text: str) -> str:
    chart = yaml.safe_load(chart_text)
    table = rows(yaml.safe_load(values_text), documented(values_text))
    name, version = chart["name"], chart["version"]
    return f"""<!-- Generated by hack/chart-readme.py from values.yaml and Chart.yaml: do not edit by hand.
     Run `python hack/chart-readme.py` after changing them (a unit test fails on drift). -->
# {name}

{chart["description"].strip()}

Chart version {version}, app version {chart["appVersion"]}, Kubernetes {chart["kubeVersion"]}. Home: {chart["home"]}

## Install

The chart installs the TideDeployment CRD (kept on uninstall), the operator, its RBAC and its
configuration. From a packaged chart (`helm package charts/{name}` in a checkout writes
`{name}-{version}.tgz`):

```sh
helm install tide {name}-{version}.tgz -n tide-system --create-namespace
kubectl -n tide-system rollout status deploy/tide-{name}
kubectl explain tidedeployment.spec          # every field of the custom resource
kubectl get tidedeployments -A               # short name: td
```

Change values with `--set key=value` or `-f my-values.yaml`; `values.schema.json` refuses unknown
keys and malformed values on install, upgrade, lint and template. Upgrade with
`helm upgrade tide {name}-{version}.tgz -n tide-system --reuse-values`; `helm uninstall tide -n tide-system`
keeps the CRD and every TideDeployment while `crds.keep` is true.

## Values

| Key | Type | Default | Description |
|-----|------|---------|-------------|
""" + "\n".join(table) + "\n"


def main(argv: list[str]) -> int:
    text = readme((CHART_DIR / "values.yaml").read_text(), (CHART_DIR / "Chart.yaml").read_text())
    if argv == ["--check"]:
        if README.read_text() != text:
            print(f"{README} drifted: run `python hack/chart-readme.py`", file=sys.stderr)
            return 1
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
