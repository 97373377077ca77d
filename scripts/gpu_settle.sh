#!/usr/bin/env bash
# Issue 15 on the lent GPU machine: build llama-server (unless a warm machine has it), then run
# scripts/gpu_settle.py's stages (baseline, shrink, minimize, confirm, sweep, sanitize, debug)
# until DEADLINE, and pack what they measured into $OUT. A second call on the warm machine
# resumes the stages where the first stopped. From the repository root, `.gpu` carried, after
# scripts/gpu_bundle.sh has run here:
#
#   set -o pipefail; DEADLINE=570 scripts/gpu_settle.sh 2>&1 | tee $OUT/log
#
# $OUT gets: settle.md (the tables), state.json (every number), settle.tar.gz (raw runs with each
# request's tokens and top-10 logprobs per position, sanitizer logs, debug log slices, server
# log tails) and machine.txt.
#
# Knobs: DEADLINE (seconds from the start; default 570), STAGES (comma list; default all),
# SCALE (multiplies every row's runs), SERVEFUZZ_GPU_WORK, JOBS, LLAMA_SERVER and CPU=1 (a dry
# run with a CPU build: no -ngl), FRESH=1 (forget the state of an earlier call).
set -euo pipefail

cd "$(dirname "$0")/.."
START=$(date +%s)
W=${SERVEFUZZ_GPU_WORK:-/tmp/servefuzz-gpu}
OUT=${OUT:?set OUT to the folder results go to}
SETTLE=$W/settle
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1

say() { printf '[gpu_settle %(%H:%M:%S)T] %s\n' -1 "$*"; }

[[ -f .gpu/settle/finding.json && -f .gpu/tiny.gguf ]] || { say "error: .gpu/ lacks the bundle (scripts/gpu_bundle.sh)"; exit 2; }
[[ -f .gpu/servefuzz-src.tar.gz ]] || { say "error: .gpu/ lacks servefuzz-src.tar.gz (scripts/gpu_bundle.sh)"; exit 2; }
[[ ${FRESH:-0} == 1 ]] && rm -rf -- "$SETTLE"
mkdir -p "$SETTLE" "$OUT"

# servefuzz's oracles judge every run (gpu_settle.py imports them): the bundle's snapshot, and
# the wheels only for what this python3 lacks, set up as scripts/gpu_run.sh sets them up.
rm -rf -- "$W/py" && mkdir -p "$W/py"
tar -xzf .gpu/servefuzz-src.tar.gz -C "$W/py"
if ! python3 -c 'import numpy, jsonschema' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$W/site" .gpu/wheels/*.whl
fi
export PYTHONPATH=$W/py:$W/site
python3 -c 'import servefuzz.oracles' || { say "error: the bundle's servefuzz does not import"; exit 2; }

pack() {
    # Files come back only under 16 MiB each and at most 8 of them.
    ( cd "$SETTLE" && [[ -f raw.jsonl ]] && xz -T0 -6 -c raw.jsonl >raw.jsonl.xz ) || true
    ( cd "$SETTLE" && mkdir -p log-tails && for f in logs/*.log; do
          [[ -f $f ]] && tail -c 200000 "$f" >"log-tails/$(basename "$f")"; done ) || true
    tar -C "$SETTLE" -czf "$OUT/settle.tar.gz" --ignore-failed-read \
        state.json raw.jsonl.xz log-tails debug $(cd "$SETTLE" && ls logs/sanitizer-*.txt logs/trace-*.txt 2>/dev/null) 2>/dev/null || true
    [[ -f $SETTLE/state.json ]] && cp "$SETTLE/state.json" "$OUT/state.json"
    say "packed: $(cd "$OUT" && du -ch ./* 2>/dev/null | tail -1 | cut -f1) in $OUT; $(( $(date +%s) - START )) s since the start"
}
trap pack EXIT

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
    nvcc --version 2>&1 | tail -1 || true
    { command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer; } 2>&1 | head -1
    compute-sanitizer --version 2>&1 | tail -1 || true
    python3 --version
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

BIN=$(scripts/gpu_build.sh | tail -1)
"$BIN" --version 2>&1 | grep -iE 'version|built|CUDA|device' | tee -a "$OUT/machine.txt" || true

# A second binary with the CUDA graph path instrumented (scripts/gpu_patch_trace.py; nothing changes
# unless its environment variables are set): an incremental rebuild of ggml-cuda.cu in the same
# build folder. Skipped with TRACE_BUILD=0 or when there is no source tree (LLAMA_SERVER given).
TRACE_BIN=$W/cache/llama-server-trace
if [[ ${TRACE_BUILD:-1} == 1 && ! -x $TRACE_BIN && -d $W/src/llama.cpp ]]; then
    t0=$(date +%s)
    if python3 .gpu/settle/gpu_patch_trace.py "$W/src/llama.cpp" \
        && cmake --build "$W/build" --target llama-server -j "${JOBS:-16}" >"$W/build-trace.log" 2>&1; then
        cp "$W/build/bin/llama-server" "$TRACE_BIN"
        say "patched (trace) llama-server built in $(( $(date +%s) - t0 )) s"
    else
        grep -m5 -B2 -A8 'error' "$W/build-trace.log" || tail -20 "$W/build-trace.log" || true
        say "the patched build failed; going on without it"
    fi
fi

UNTIL=$(( START + ${DEADLINE:-570} - 30 ))   # leave time to pack
say "settling until $(date -d @"$UNTIL" +%H:%M:%S) ($(( UNTIL - $(date +%s) )) s)"
python3 .gpu/settle/gpu_settle.py run --server "$BIN" --gguf .gpu/tiny.gguf --finding .gpu/settle/finding.json \
    --work "$SETTLE" --out "$OUT" --until "$UNTIL" --scale "${SCALE:-1}" \
    $( [[ -x $TRACE_BIN ]] && echo --trace-server "$TRACE_BIN" ) \
    ${STAGES:+--stages "$STAGES"} ${CPU:+--cpu --threads 1}
