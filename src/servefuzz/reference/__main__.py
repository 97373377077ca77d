"""`python -m servefuzz.reference [flags]`: the same entry point as `servefuzz serve-reference`."""

from __future__ import annotations

import sys

from servefuzz.reference.server import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
