#!/usr/bin/env bash
# Build llama-server with CUDA for the H200 (sm_90) from .gpu/llama.cpp-<commit>.tar.gz, on the
# lent GPU machine; skipped when the binary is already there (a warm machine keeps the work
# folder). Prints the binary's path on its last line. Used by scripts/gpu_run.sh and
# scripts/gpu_settle.sh.
#
#   BIN=$(scripts/gpu_build.sh | tail -1)
#
# Knobs: SERVEFUZZ_GPU_WORK (default /tmp/servefuzz-gpu), JOBS=16, LLAMA_SERVER (use this binary
# instead of building one: a dry run on a CPU machine).
set -euo pipefail

cd "$(dirname "$0")/.."
W=${SERVEFUZZ_GPU_WORK:-/tmp/servefuzz-gpu}
COMMIT=$(sed -n 's/^LLAMA_CPP_COMMIT=\([0-9a-f]*\).*/\1/p' scripts/setup_engines.sh)
BIN=$W/cache/llama.cpp-$COMMIT/llama-server   # where servefuzz.engine_files looks (SERVEFUZZ_CACHE=$W/cache)

say() { printf '[gpu_build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { say "error: $*"; exit 1; }

if [[ -n ${LLAMA_SERVER:-} ]]; then
    mkdir -p "$(dirname "$BIN")" && ln -sf "$LLAMA_SERVER" "$BIN"
    say "using $LLAMA_SERVER, no build"
elif [[ -x $BIN ]]; then
    say "llama-server already built: $BIN"
else
    [[ -f .gpu/llama.cpp-$COMMIT.tar.gz ]] || die ".gpu/ is missing: run scripts/gpu_bundle.sh here and carry .gpu"
    start=$SECONDS src=$W/src
    rm -rf -- "$src" "$W/build" && mkdir -p "$src"
    tar -xzf ".gpu/llama.cpp-$COMMIT.tar.gz" -C "$src"
    # The flags of scripts/setup_engines.sh, plus CUDA for the H200 (sm_90) and no NCCL (one
    # GPU). The trimmed sources carry no git metadata, so the build is told its commit: the
    # server then reports the same build_info (b1-<commit>) as the CPU build.
    cmake -S "$src/llama.cpp" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF \
        -DLLAMA_BUILD_NUMBER=1 -DLLAMA_BUILD_COMMIT="${COMMIT:0:7}" >"$W/cmake.log" 2>&1 \
        || { tail -30 "$W/cmake.log" >&2; die "cmake configure failed"; }
    cmake --build "$W/build" --target llama-server -j "${JOBS:-16}" >"$W/build.log" 2>&1 \
        || { grep -m5 -B2 -A8 'error' "$W/build.log" >&2 || tail -30 "$W/build.log" >&2; die "build failed"; }
    mkdir -p "$(dirname "$BIN")"
    cp "$W/build/bin/llama-server" "$BIN"
    say "llama-server built in $((SECONDS - start)) s ($(du -h "$BIN" | cut -f1))"
fi
echo "$BIN"
