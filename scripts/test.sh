#!/usr/bin/env bash
# The whole test suite, from a fresh clone: install, then run every test.
# Real engines included: setup_engines.sh installs vLLM (CPU) and builds llama-server into a cache
# outside the checkout (~/.cache/servefuzz, keyed by version) and skips what is already there.
# Each step says when it finished (seconds from the start), and each of pytest's two runs (below)
# ends with its 25 slowest tests and its time by group: where the command's time went
# (docs/benchmarks.md). Any failure in either run fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stamp() { printf 'test.sh: %s at %d s\n' "$1" $((SECONDS - start)); }
# The engines first, in the background: on a fresh machine their setup is minutes of compiling,
# while servefuzz's own install and Chromium's are mostly downloads.
./scripts/setup_engines.sh &
engines=$!
trap 'wait' EXIT   # whatever fails below, nothing this script started is left running on its own
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
# Bytecode, once: where PYTHONDONTWRITEBYTECODE is set (this machine sets it), every pytest worker
# would compile servefuzz and rewrite the tests again, and every subprocess of the suite (a CLI
# run, a reference server) compile what it imports: one pass with writing on leaves the compiled
# forms (pytest's rewritten tests included) for all of them to read, which that variable never
# stops. A worker's collection then takes 1.3 CPU s instead of 5, a CLI start 0.47 instead of 0.65.
PYTHONDONTWRITEBYTECODE= python -m compileall -q src
PYTHONDONTWRITEBYTECODE= python -m pytest -q --collect-only -p no:cacheprovider >/dev/null \
  || true   # a test that does not collect is reported by the runs below, with its error
stamp "bytecode written"
# pytest in two runs (tests/conftest.py, SERVEFUZZ_TEST_PART says which):
# - the tests that need no real engine (about nine tenths of them) start now, beside the engines'
#   setup, niced a little: the setup and then the engines' tests, the command's long pole, get
#   the cores first, and these take the rest (the build's waits, the engines' start-ups), then
#   the whole machine once the engines' tests are done;
# - the real engines' tests once the setup has finished, two workers for their two groups
#   (vLLM's on one, the other engines' on the other; each group runs in order on its worker).
# Three workers for the first run: much of a test's time is a server starting or a campaign
# waiting on one (docs/benchmarks.md).
SERVEFUZZ_TEST_PART=no-engines nice -n 5 \
  python -m pytest -q -n "${SERVEFUZZ_TEST_WORKERS:-3}" --dist loadgroup --durations=25 "$@" &
others=$!
engines_ok=0
wait "$engines" || engines_ok=$?
if [[ $engines_ok -ne 0 ]]; then
  echo "test.sh: the engines' setup failed (see above)" >&2
  wait "$others" || true
  exit 1
fi
stamp "engines ready"
# Their output is held until the first run has ended, so that the two runs' lines do not mix.
engine_log=$(mktemp)
trap 'wait; rm -f "$engine_log"' EXIT
SERVEFUZZ_TEST_PART=engines \
  python -m pytest -q -n 2 --dist loadgroup --durations=25 "$@" >"$engine_log" 2>&1 &
engine_tests=$!
others_rc=0
wait "$others" || others_rc=$?
stamp "the tests without a real engine done (exit $others_rc)"
engine_rc=0
wait "$engine_tests" || engine_rc=$?
echo "test.sh: the real engines' tests (run beside the rest from 'engines ready'):"
cat "$engine_log"
stamp "the real engines' tests done (exit $engine_rc)"
# Exit 5 is pytest's "no tests collected": arguments that pick tests of one part leave the other
# part empty, which is no failure. Both empty is.
if [[ $others_rc -eq 5 && $engine_rc -eq 5 ]]; then exit 5; fi
[[ $others_rc -eq 5 ]] && others_rc=0
[[ $engine_rc -eq 5 ]] && engine_rc=0
if [[ $others_rc -ne 0 ]]; then exit "$others_rc"; fi
exit "$engine_rc"
