"""python -m tide_trainer.tiny_target build | launch-draft: build (or find) a cached tiny model; prints its path.

`build --out DIR` and `draft --target DIR --recipe JSON` are the pinned child processes those start
(tiny_target.pinned); run by hand they refuse an unpinned environment.
"""

import argparse
import json
import logging
from pathlib import Path

from tide_trainer.tiny_target.build import BuildSettings, build_pinned, ensure_tiny_target
from tide_trainer.tiny_target.launch_draft import DraftRecipe, ensure_launch_draft, train_draft


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tide_trainer.tiny_target")
    parser.add_argument("command", choices=["build", "launch-draft", "draft"])
    parser.add_argument("--out", type=Path, help="build: the directory to build into (pinned child)")
    parser.add_argument("--target", type=Path, help="draft: the target directory")
    parser.add_argument("--recipe", help="draft: a DraftRecipe as JSON")
    parser.add_argument("--steps", type=int, help="build --out: fewer training steps (tests of the pinning)")
    args = parser.parse_args()
    if args.command == "build":
        settings = BuildSettings(steps=args.steps, warmup=1) if args.steps else None
        print(build_pinned(args.out, settings) if args.out else ensure_tiny_target())
    elif args.command == "launch-draft":
        print(ensure_launch_draft())
    else:
        if not (args.target and args.recipe):
            parser.error("draft needs --target and --recipe")
        print(train_draft(args.target, DraftRecipe(**json.loads(args.recipe))))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    main()
