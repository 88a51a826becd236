"""python -m tide_trainer.tiny_target build: build (or find) the cached tiny target; prints its path."""

import logging
import sys

from tide_trainer.tiny_target.build import ensure_tiny_target

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python -m tide_trainer.tiny_target build")
    print(ensure_tiny_target())
