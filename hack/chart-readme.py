#!/usr/bin/env python3
"""Write charts/tide-operator/README.md from the chart's values.yaml and Chart.yaml (stdlib only).

helm-docs conventions: a `# -- text` comment right above a key documents it (following `# ` lines
continue the text); `# -- (type) text` names the type; `# @default -- text` replaces the shown default
(otherwise a long list shows its length and item names). Every leaf value gets a row (Key, Type,
Default, Description), and so does a documented mapping, followed by its keys.

    python hack/chart-readme.py           # rewrite the README
    python hack/chart-readme.py --check   # exit 1 when the committed README differs

The YAML reader covers what the chart's files use (block mappings and sequences, flow collections,
plain and quoted scalars, folded and literal block scalars); tests/unit/chart/test_chart_readme.py
checks that it reads values.yaml and Chart.yaml exactly as PyYAML does.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHART_DIR = Path(__file__).resolve().parents[1] / "charts" / "tide-operator"
README = CHART_DIR / "README.md"
KEY = re.compile(r"""^("[^"]*"|'[^']*'|[^\s\-?:,\[\]{}#&*!|>'"%@`][^:#]*?|-[^\s:][^:#]*?)\s*:(?:\s+|$)""")
INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$")
FLOAT = re.compile(r"^[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")
BLOCK_SCALAR = {"|", "|-", ">", ">-"}
INLINE_DEFAULT_MAX = 100  # longer defaults: a mapping's keys get rows, a list is summarised


@dataclass(frozen=True)
class Line:
    indent: int
    text: str  # without indentation and trailing comment


# ---- reading YAML ----------------------------------------------------------------------------


def strip_comment(text: str) -> str:
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'" and (i == 0 or text[i - 1] in " \t[{,:"):
            quote = char
        elif char == "#" and (i == 0 or text[i - 1] in " \t"):
            return text[:i].rstrip()
    return text.rstrip()


def content_lines(text: str) -> list[Line]:
    lines = []
    for raw in text.splitlines():
        body = strip_comment(raw)
        if body.strip() and not body.lstrip().startswith("---"):
            lines.append(Line(len(body) - len(body.lstrip(" ")), body.strip()))
    return lines


WORDS = {"": None, "~": None, "null": None, "Null": None, "NULL": None,
         "true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}


def scalar(text: str) -> Any:
    if text[:1] == '"':
        return json.loads(text)
    if text[:1] == "'":
        return text[1:-1].replace("''", "'")
    if text in WORDS:
        return WORDS[text]
    if INT.match(text):
        return int(text)
    return float(text) if FLOAT.match(text) else text


class Flow:
    """One inline value: a flow sequence or mapping, or a scalar."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def parse(self) -> Any:
        if self.text[:1] not in "[{":
            return scalar(self.text)
        value = self.value()
        if self.text[self.pos:].strip():
            raise ValueError(f"unexpected text after a flow value: {self.text!r}")
        return value

    def value(self) -> Any:
        self.skip()
        char = self.text[self.pos:self.pos + 1]
        if char == "[":
            return self.items("]", self.value)
        if char == "{":
            pairs = self.items("}", self.pair)
            return dict(pairs)
        if char in "\"'":
            end = self.text.index(char, self.pos + 1)
            while char == "'" and self.text[end + 1:end + 2] == "'":
                end = self.text.index(char, end + 2)
            token, self.pos = self.text[self.pos:end + 1], end + 1
            return scalar(token)
        match = re.compile(r"(?:[^,\[\]{}:]|:(?=[^\s,\]}]))*").match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()
        return scalar(match.group().strip())

    def pair(self) -> tuple[Any, Any]:
        key = self.value()
        self.skip()
        if self.text[self.pos:self.pos + 1] != ":":
            raise ValueError(f"expected ':' in {self.text!r}")
        self.pos += 1
        return key, self.value()

    def items(self, close: str, item: Any) -> list[Any]:
        self.pos += 1
        found: list[Any] = []
        while True:
            self.skip()
            if self.text[self.pos:self.pos + 1] == close:
                self.pos += 1
                return found
            found.append(item())
            self.skip()
            if self.text[self.pos:self.pos + 1] == ",":
                self.pos += 1

    def skip(self) -> None:
        while self.text[self.pos:self.pos + 1] in (" ", "\t") and self.pos < len(self.text):
            self.pos += 1


def parse_yaml(text: str) -> Any:
    lines = content_lines(text)
    value, end = block(lines, 0, lines[0].indent)
    if end != len(lines):
        raise ValueError(f"cannot read line {lines[end].text!r} (indentation?)")
    return value


def block(lines: list[Line], i: int, indent: int) -> tuple[Any, int]:
    if lines[i].text == "-" or lines[i].text.startswith("- "):
        return sequence(lines, i, indent)
    return mapping(lines, i, indent)


def mapping(lines: list[Line], i: int, indent: int) -> tuple[dict[str, Any], int]:
    found: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent and not lines[i].text.startswith("-"):
        match = KEY.match(lines[i].text)
        if match is None:
            raise ValueError(f"expected 'key: value', got {lines[i].text!r}")
        key, rest, i = scalar(match.group(1)), lines[i].text[match.end():], i + 1
        if rest in BLOCK_SCALAR:
            found[key], i = block_scalar(lines, i, indent, rest)
        elif rest:
            found[key] = Flow(rest).parse()
        elif i < len(lines) and (lines[i].indent > indent or lines[i].text.startswith("- ")):
            found[key], i = block(lines, i, lines[i].indent)
        else:
            found[key] = None
    return found, i


def sequence(lines: list[Line], i: int, indent: int) -> tuple[list[Any], int]:
    found: list[Any] = []
    while i < len(lines) and lines[i].indent == indent and (lines[i].text == "-" or lines[i].text.startswith("- ")):
        rest = lines[i].text[1:].lstrip()
        if not rest:
            value, i = block(lines, i + 1, lines[i + 1].indent)
        elif KEY.match(rest):  # "- key: value": a mapping whose keys line up with this first one
            item_indent = indent + len(lines[i].text) - len(rest)
            lines[i] = Line(item_indent, rest)
            value, i = mapping(lines, i, item_indent)
        else:
            value, i = Flow(rest).parse(), i + 1
        found.append(value)
    return found, i


def block_scalar(lines: list[Line], i: int, indent: int, style: str) -> tuple[str, int]:
    """`|` or `>` (with `-`): no blank lines or `#` inside (the chart's files have none)."""
    parts, base = [], lines[i].indent if i < len(lines) else 0
    while i < len(lines) and lines[i].indent > indent:
        parts.append(" " * (lines[i].indent - base) + lines[i].text)
        i += 1
    text = (" " if style.startswith(">") else "\n").join(parts)
    return text if style.endswith("-") else text + "\n", i


# ---- helm-docs comments ----------------------------------------------------------------------


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
            stack.append((indent, None if stripped.startswith("-") or match is None else scalar(match.group(1))))
            path = tuple(key for _, key in stack)
            if words is not None and None not in path:
                docs[path] = _doc(" ".join(w for w in words if w), default)  # type: ignore[arg-type]
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
    chart = parse_yaml(chart_text)
    table = rows(parse_yaml(values_text), documented(values_text))
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
