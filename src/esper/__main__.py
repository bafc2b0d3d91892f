"""`python -m esper` runs the esper command line."""

import sys

from esper.scripts.train import main

sys.exit(main())
