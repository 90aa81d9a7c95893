"""Entry point of ``python -m benchmarks.peers``."""

import sys

from benchmarks.peers.runner import main

sys.exit(main())
