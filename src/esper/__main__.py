"""`python -m esper` runs the esper command line."""

import sys

from esper.cli.main import main

sys.exit(main())
