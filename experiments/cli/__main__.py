"""``python -m experiments.cli ARGS``: the same as ``pubsublab ARGS``."""

import sys

from experiments.cli import main

sys.exit(main())
