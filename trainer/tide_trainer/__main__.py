import sys

from tide_trainer.cli import main

sys.exit(main())
