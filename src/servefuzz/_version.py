"""The version of servefuzz, written here and nowhere else.

pyproject.toml reads it (`[tool.setuptools.dynamic]`, at build time), the package exports it as
`servefuzz.__version__`, and modules that print it (`cli.parser`, `reports.issue_md`) import it
from here: this module imports nothing, so it sits in the lowest layer.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
