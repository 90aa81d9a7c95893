import sys

from simpleworkflow.cli import main

sys.exit(main())
