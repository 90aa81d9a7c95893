"""``python -m simpleworkflow``: the same command as ``simpleworkflow``."""

import sys

from simpleworkflow.cli import main

sys.exit(main())
