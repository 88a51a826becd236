"""Flags of the vLLM server that the operator sets itself and ``inference.extraArgs`` may not.

vLLM's FlexibleArgumentParser accepts more spellings than ``--flag value``, and each must be refused:
``--flag=value``; underscores for dashes (``--served_model_name``); dotted JSON keys
(``--speculative-config.method eagle``); argparse abbreviations (``--served-model``, since
``allow_abbrev`` stays on); a short flag glued to its value (``-tp4``); and ``--config file.yaml``,
which can set any of them. One regular expression (RE2-compatible) feeds both the Python check and
the CRD's CEL rule, so both refuse exactly the same arguments.
"""

from __future__ import annotations

import re

# Long flags the operator owns: identity of the target and draft, bind address, plugin classes, and the
# shutdown drain (it must fit the pod's grace period, which the operator sets from the same config).
OWNED_LONG_FLAGS: tuple[str, ...] = (
    "--model",
    "--revision",
    "--tokenizer",
    "--tokenizer-revision",
    "--served-model-name",
    "--tensor-parallel-size",
    "--speculative-config",
    "--host",
    "--port",
    "--worker-extension-cls",
    "--scheduler-cls",
    "--load-format",
    "--shutdown-timeout",
    "--config",
)
# Short aliases: refused with anything glued on, and their one-letter abbreviations.
OWNED_SHORT_FLAGS: tuple[str, ...] = ("-tp", "-sc")


def _any_prefix(name: str) -> str:
    """Regex matching every non-empty prefix of ``name``, ``_`` allowed wherever ``-`` is."""
    atoms = ["[-_]" if char == "-" else char for char in name]
    pattern = ""
    for atom in reversed(atoms[1:]):
        pattern = f"(?:{atom}{pattern})?"
    return atoms[0] + pattern


def _owned_pattern() -> str:
    # Plain [a-z-] names need no escaping, which keeps the pattern a valid CEL string literal.
    if not all(re.fullmatch(r"--?[a-z][a-z-]*", flag) for flag in OWNED_LONG_FLAGS + OWNED_SHORT_FLAGS):
        raise ValueError("owned flags must be lower-case words joined by dashes")
    longs = "|".join(_any_prefix(flag[2:]) for flag in OWNED_LONG_FLAGS)
    shorts = "|".join(f"{flag}.*|{flag[:2]}" for flag in OWNED_SHORT_FLAGS)
    return f"^(?:--(?:{longs})(?:[=.].*)?|--|{shorts})$"


OWNED_ARG_PATTERN = _owned_pattern()
_OWNED_ARG = re.compile(OWNED_ARG_PATTERN, re.DOTALL)


def denied_flag(arg: str) -> str | None:
    """The owned flag ``arg`` would set, or None when the operator does not own it."""
    if not _OWNED_ARG.match(arg):
        return None
    if arg.startswith("--"):
        name = re.split(r"[=.]", arg[2:], maxsplit=1)[0].replace("_", "-")
        return next((flag for flag in OWNED_LONG_FLAGS if flag[2:].startswith(name)), "--") if name else "--"
    return next(flag for flag in OWNED_SHORT_FLAGS if flag.startswith(arg[:3]))


def cel_rule() -> str:
    """The CEL rule on the ``extraArgs`` list that mirrors ``denied_flag``."""
    return f"self.all(a, !a.matches('{OWNED_ARG_PATTERN}'))"
