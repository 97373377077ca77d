#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install, then run every test.
# Real engines included: setup_engines.sh installs vLLM (CPU) and builds llama-server into a cache
# outside the checkout (~/.cache/servefuzz, keyed by version) and skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test,models]'
./scripts/setup_engines.sh
exec python -m pytest -q "$@"
