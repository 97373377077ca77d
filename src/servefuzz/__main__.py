"""`python -m servefuzz` is the `servefuzz` command."""

import sys

from servefuzz.cli import main

sys.exit(main())
