#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install, then run every test.
# Real engines included: setup_engines.sh installs vLLM (CPU) and builds llama-server into a cache
# outside the checkout (~/.cache/servefuzz, keyed by version) and skips what is already there.
# Each step says when it finished (seconds from the start) and pytest ends with its 25 slowest
# tests and its time by group: where the command's time went (docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stamp() { printf 'test.sh: %s at %d s\n' "$1" $((SECONDS - start)); }
# The engines first, in the background: on a fresh machine their setup is minutes of compiling,
# while servefuzz's own install and Chromium's are mostly downloads.
./scripts/setup_engines.sh &
engines=$!
trap 'wait' EXIT   # whatever fails below, the engines' setup is not left running on its own
python -m pip install -q -e '.[test,models,ray]'
stamp "servefuzz installed"
# Headless Chromium renders report.html in the report tests (Debian package, about 20 s).
if ! command -v chromium >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    || echo "warning: could not install chromium; the report screenshot test will skip" >&2
fi
# The code's shape is part of the suite: lint, then strict types on src (pyproject.toml says how).
# Beside the engines' setup, which they do not need.
python -m ruff check src tests bench
stamp "lint done"
python -m mypy
stamp "types done"
wait "$engines" || { echo "test.sh: the engines' setup failed (see above)" >&2; exit 1; }
stamp "engines ready"
# Three workers (pytest-xdist) on two cores: much of a test's time is a server starting or a
# campaign waiting on one; two workers kept 1.36 cores busy, three keep 1.8 (docs/benchmarks.md).
# tests/conftest.py keeps vLLM's tests on one worker and the other engines' tests on another.
exec python -m pytest -q -n "${SERVEFUZZ_TEST_WORKERS:-3}" --dist loadgroup --durations=25 "$@"
