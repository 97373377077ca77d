"""Run at start-up by every Python process with this folder on its path: a launched engine's
when servefuzz traces its coverage (`servefuzz_tracer`, which does nothing without its env var).
SGLang's processes have the stand-ins folder first on their path, whose own sitecustomize
imports the tracer the same way."""

from __future__ import annotations

import servefuzz_tracer  # noqa: F401 - importing it starts it
