#!/usr/bin/env bash
# Prepare .gpu/, everything scripts/gpu_run.sh needs on the lent GPU machine, which reaches no
# registry and no model hub:
#   .gpu/llama.cpp-<commit>.tar.gz  llama.cpp from the llama-cpp-python sdist, trimmed to what a
#                                   CUDA build of llama-server reads (about 9 MB)
#   .gpu/tiny.gguf                  the tiny model, from `servefuzz model build` (seed 0)
#   .gpu/servefuzz-src.tar.gz       src/servefuzz as committed at SNAPSHOT (default HEAD), never
#                                   the live working tree, where someone may be mid-edit
#   .gpu/settle/                    scripts/gpu_settle.py and the finding that issue 15 settles, as
#                                   committed at SETTLE_REF (default HEAD), for scripts/gpu_settle.sh
#   .gpu/wheels/*.whl               what servefuzz imports and the GPU image lacks (cp312)
#   .gpu/ray-<version>-cp312.tar.xz the files of the cp312 manylinux Ray wheel (`fuzz --ray`),
#                                   without what a local cluster never reads (28 MB of xz: the
#                                   wheel's 79 MB would not fit a call's 64 MiB)
#   .gpu/MANIFEST                   what went in, with checksums
#
# Or, with engines named (`scripts/gpu_bundle.sh vllm@0.26.0`, `sglang@0.5.17`), a bundle to run
# that engine's launch preset (`--launch vllm-gpu`, `--launch sglang-gpu`) instead of llama.cpp
# (`sglang@0.5.17+fa3`: with SGLang's FA3 library cut to head dim 64 bfloat16, FA3_KERNELS below):
#   .gpu/engines/NAME-gpu-VERSION.tar.xz  the engine's wheels as scripts/gpu-engines/NAME-VERSION.txt
#                                   pins them (sha256), installed into site/ and trimmed to what a
#                                   dense model on an H200 (sm_90) loads (vLLM 43 MB with its MoE ops, SGLang 36)
#   .gpu/models/                    `servefuzz model build` (seed 0): its hf-float32 folder
#   .gpu/servefuzz-src.tar.gz, .gpu/wheels/, .gpu/MANIFEST as above; no llama.cpp, no Ray
#   .gpu/flashinfer-jit-*.tar.xz    with sglang: FlashInfer's JIT modules, when the pack that
#                                   scripts/gpu-flashinfer.sha256 pins is at hand (bundle_flashinfer)
# One engine per bundle: a device call carries at most 64 MiB, the working tree included.
# .gpu/ is ignored through .git/info/exclude and never committed. Downloads are cached under
# ${SERVEFUZZ_CACHE:-~/.cache/servefuzz}, so a second bundle costs a few seconds.
#
#   scripts/gpu_bundle.sh && du -sh .gpu
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
GPU=$ROOT/.gpu
CACHE="${SERVEFUZZ_CACHE:-$HOME/.cache/servefuzz}"
PYTHON="${SERVEFUZZ_PYTHON:-python3}"
SNAPSHOT=$(git rev-parse --verify "${SNAPSHOT:-HEAD}^{commit}")       # a commit whose servefuzz imports
SETTLE_REF=$(git rev-parse --verify "${SETTLE_REF:-HEAD}^{commit}")
FINDING=docs/findings/llamacpp-cuda-ub512/finding.json   # issue 15's finding (gpu_settle.sh)
# The llama.cpp pins live in setup_engines.sh (mirrored in servefuzz.engines.llamacpp); read them there.
pin() { sed -n "s/^$1=\([0-9A-Za-z.]*\).*/\1/p" scripts/setup_engines.sh; }
SDIST_VERSION=$(pin LLAMA_CPP_PYTHON_VERSION)
COMMIT=$(pin LLAMA_CPP_COMMIT)
# What the GPU image lacks of servefuzz's imports (it has aiohttp, numpy, rich, attrs and
# typing-extensions); versions are the ones servefuzz is tested with here.
WHEELS=(jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0)
# Ray, the `[ray]` extra's pin (pyproject.toml). Its other needs (click, filelock, msgpack,
# packaging, protobuf, pyyaml, requests, aiohttp & co.) are in the GPU image (the device's
# KINDS.md), jsonschema is in WHEELS. Left out: the Java jars, the dashboard's web build, and the
# libraries on top of the core (data, train, tune, serve, rllib, llm, air), which
# `fuzz --ray` and `triage --ray` never import; a local cluster runs without the dashboard.
RAY_VERSION=$(sed -n 's/^ *"ray==\([0-9.]*\)".*/\1/p' pyproject.toml)
RAY_TRIM=(jars dashboard/client/build rllib data train tune serve llm air)
# Left out of the sources: models, docs, tests, benches, examples and every GPU backend but CUDA.
# Kept: tools/ui (tools/CMakeLists.txt adds it whenever the server is built) and scripts/
# (ui-assets.cmake runs at build time).
TRIM=(models docs tests benches media examples pocs gguf-py conversion ci requirements skills
      .github .devops .gemini .pi .git 'convert_*.py'
      ggml/src/ggml-{blas,cann,et,hexagon,hip,metal,musa,opencl,openvino,rpc,sycl,virtgpu,vulkan,webgpu,zdnn,zendnn})

say() { printf 'gpu_bundle: %s\n' "$*"; }
die() { say "error: $*" >&2; exit 1; }

[[ -n $SDIST_VERSION && -n $COMMIT ]] || die "cannot read the llama.cpp pins from scripts/setup_engines.sh"

exclude_gpu_dir() {
    local exclude
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qxF '/.gpu/' "$exclude" 2>/dev/null || echo '/.gpu/' >>"$exclude"
}

bundle_sources() {
    local sdist="$CACHE/downloads/llama_cpp_python-$SDIST_VERSION.tar.gz"
    local out="$GPU/llama.cpp-$COMMIT.tar.gz"
    if [[ ! -f $sdist ]]; then
        say "downloading the llama-cpp-python $SDIST_VERSION sdist (77 MB)"
        mkdir -p "$(dirname "$sdist")"
        "$PYTHON" -m pip download -q --no-binary :all: --no-deps -d "$(dirname "$sdist")" \
            "llama-cpp-python==$SDIST_VERSION"
    fi
    local tmp=$WORK/sources top="llama_cpp_python-$SDIST_VERSION"
    mkdir "$tmp"
    local excludes=()
    for path in "${TRIM[@]}"; do excludes+=(--exclude="$top/vendor/llama.cpp/$path"); done
    tar -xzf "$sdist" -C "$tmp" "${excludes[@]}" \
        "$top/vendor/llama.cpp" "$top/.git/modules/vendor/llama.cpp/HEAD"
    local head
    head=$(cat "$tmp/$top/.git/modules/vendor/llama.cpp/HEAD")
    [[ $head == "$COMMIT"* ]] || die "the sdist vendors llama.cpp $head, expected $COMMIT"
    mv "$tmp/$top/vendor/llama.cpp" "$tmp/llama.cpp"
    # Fixed owner and order: the same sdist gives the same tarball.
    tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - llama.cpp \
        | gzip -9n >"$out"
}

bundle_model() {
    local tmp=$WORK/model
    PYTHONPATH="$WORK/servefuzz" "$PYTHON" -m servefuzz model build "$tmp" --seed 0 >/dev/null   # the snapshot's
    cp "$tmp/tiny.gguf" "$GPU/tiny.gguf"
}

bundle_servefuzz() {
    local tmp=$WORK/servefuzz
    mkdir "$tmp"
    # From a commit, not from the working tree: the tree is shared, and a half-edited module
    # must not reach the device.
    git archive --format=tar "$SNAPSHOT" src/servefuzz | tar -C "$tmp" -xf - --strip-components=1
    PYTHONPATH="$tmp" "$PYTHON" -m servefuzz --help >/dev/null \
        || die "src/servefuzz at $SNAPSHOT does not import (SNAPSHOT=<commit> names one that does)"
    tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner -czf "$GPU/servefuzz-src.tar.gz" servefuzz
}

bundle_settle() {
    mkdir -p "$GPU/settle"
    git show "$SETTLE_REF:scripts/gpu_settle.py" >"$GPU/settle/gpu_settle.py"
    git show "$SETTLE_REF:scripts/gpu_patch_trace.py" >"$GPU/settle/gpu_patch_trace.py"
    git show "$SETTLE_REF:$FINDING" >"$GPU/settle/finding.json"
}

bundle_wheels() {
    local cache="$CACHE/downloads/wheels-cp312"
    mkdir -p "$cache" "$GPU/wheels"
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$cache" "${WHEELS[@]}"
    for spec in "${WHEELS[@]}"; do
        local name=${spec%%==*} version=${spec#*==}
        cp "$cache/${name//-/_}-$version-"*.whl "$GPU/wheels/"
    done
}

bundle_ray() {
    local cache="$CACHE/downloads/wheels-cp312" tmp=$WORK/ray
    [[ -n $RAY_VERSION ]] || die "cannot read the ray pin from pyproject.toml"
    mkdir -p "$cache" "$tmp"
    if ! compgen -G "$cache/ray-$RAY_VERSION-cp312-*.whl" >/dev/null; then
        say "downloading the ray $RAY_VERSION cp312 wheel (79 MB)"
        "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d "$cache" "ray==$RAY_VERSION"
    fi
    local wheel
    wheel=$(compgen -G "$cache/ray-$RAY_VERSION-cp312-*.whl" | head -1)
    (cd "$tmp" && unzip -q "$wheel")
    for path in "${RAY_TRIM[@]}"; do rm -rf -- "${tmp:?}/ray/$path"; done
    # xz, not gzip: the three native programs (raylet, gcs_server, _raylet.so; 120 MB) are most of it.
    tar -C "$tmp" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . \
        | xz -T0 -6 >"$GPU/ray-$RAY_VERSION-cp312.tar.xz"
}

write_manifest() {
    {
        echo "# made by scripts/gpu_bundle.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "llama.cpp $COMMIT from llama-cpp-python==$SDIST_VERSION (sdist, trimmed)"
        echo "ray $RAY_VERSION: the cp312 wheel's files without ${RAY_TRIM[*]}"
        echo "servefuzz as committed at $(git rev-parse --short "$SNAPSHOT"), gpu_settle.py at $(git rev-parse --short "$SETTLE_REF")"
        (cd "$GPU" && find . -type f ! -name MANIFEST | sort | xargs sha256sum)
    } >"$GPU/MANIFEST"
}

# -- engine bundles (vllm@VERSION, sglang@VERSION) -----------------------------------------
# The image's Python (3.12) and glibc (2.39): pip matches a manylinux tag exactly, so every one
# up to it is named.
GPU_PLATFORM=(--python-version 3.12 --implementation cp --only-binary=:all: --platform any
              --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for glibc in $(seq 17 39); do GPU_PLATFORM+=(--platform "manylinux_2_${glibc}_x86_64"); done

# What a dense model served on sm_90 never loads, per engine (measured on the H200: the server
# starts and serves without them, ../shared/notes/gpu-engines.md):
MOE_KERNELS='^(?!.*marlin_moe_wna16::)'
MOE_KEPT='kept 21 of 37'
MOE_SHA256=8df310ed711d6b641d430f20daeae08cc1e790490d06f257eee1b73ef48c80a1
trim_vllm() {
    local site=$1 lib
    # FlashAttention 2 (FA3 is Hopper's), the FlashMLA and QuTLASS kernels, the JIT sources of
    # DeepGEMM and the sm_100 FMHA, and the optional Rust front end.
    rm -f "$site"/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so \
          "$site"/vllm/_flashmla_C.abi3.so "$site"/vllm/_flashmla_extension_C.abi3.so \
          "$site"/vllm/_qutlass_C.abi3.so "$site"/vllm/vllm-rs
    rm -rf "$site"/vllm/third_party/deep_gemm "$site"/vllm/third_party/fmha_sm100
    # The core ops cut to their sm_90 code; the MoE ops (moe_align_block_size, topk_softmax,
    # moe_sum, grouped_topk: every MoE model, the hybrids' experts too) cut to sm_90 and to all but
    # the Marlin kernels (weight-quantized experts; their sm_80 PTX was 13 of the 19.4 MB left),
    # which a bfloat16 model on the Triton MoE path never launches: 19.9 -> 1.5 MB of xz, so that
    # the bundle fits one call's 64 MiB. Checked by count and pinned by sha256, as FA3 below.
    "$PYTHON" scripts/gpu_prune_fatbin.py "$site/vllm/_C_stable_libtorch.abi3.so" "$WORK/pruned.so" 90
    mv "$WORK/pruned.so" "$site/vllm/_C_stable_libtorch.abi3.so"
    cut_pinned "$site/vllm/_moe_C_stable_libtorch.abi3.so" "$MOE_KERNELS" "$MOE_KEPT" "$MOE_SHA256" MoE
}
# Cut LIB to the sm_90 kernels matching PATTERN, in place, after checking the cut: the pruner's
# count must read KEPT and the pruned file's sha256 must be SHA (a new wheel or a changed pruner
# is looked at, and smoke-tested on the device, before it travels).
cut_pinned() {
    local lib=$1 pattern=$2 kept=$3 sha=$4 what=$5 report
    report=$("$PYTHON" scripts/gpu_prune_fatbin.py "$lib" "$WORK/cut.so" 90 "$pattern")
    say "$report"
    [[ $(tail -1 <<<"$report") == "$kept" ]] || die "$what cut: expected '$kept', got '$(tail -1 <<<"$report")'"
    [[ $(sha256sum "$WORK/cut.so" | cut -d' ' -f1) == "$sha" ]] \
        || die "$what cut: the pruned $(basename "$lib") is not the pinned one"
    mv "$WORK/cut.so" "$lib"
}
# SGLang's FA3 (`sglang@0.5.17+fa3`, the attention backend SGLang picks on Hopper): sgl_kernel's
# flash_ops cut to the sm_90 forward kernels of head dim 64 in bfloat16 (the tiny model's and
# SmolLM2-135M's; Qwen2.5-0.5B's too), the split-KV combine and the varlen scheduler, 12 of its
# 372 fat binaries: 1.12 GB -> 10.8 MB of xz. The cut is checked by count and pinned by the
# pruned file's sha256: a new wheel or a changed pruner must be looked at, and smoke-tested on
# the device, before it travels. Another head dim or dtype needs its own pattern and pin.
FA3_KERNELS='CollectiveMainloopFwdSm90<\d+, cute::tuple<cute::C<\d+>, cute::C<\d+>, cute::C<\d+> >, cute::tuple<cute::C<\d+>, cute::C<\d+>, cute::C<64> >, 64, cutlass::bfloat16_t|FlashAttnFwdCombine|prepare_varlen_num_blocks'
FA3_KEPT='kept 12 of 372'
FA3_SHA256=4c99fdd86665949471b5087b1b30a19d0cd862e48c9efe02fc2496757aff3d91
trim_sglang() {
    local site=$1 variant=${2:-}
    # The preset runs Triton attention: the kernel package's FA3 (1.1 GB; with +fa3 cut to the
    # kernels above instead), FlashMLA, InfLLM (a cp310 build) and sm_100 ops are never loaded;
    # xgrammar's static library is for linking.
    if [[ $variant == fa3 ]]; then
        cut_pinned "$site/sgl_kernel/flash_ops.abi3.so" "$FA3_KERNELS" "$FA3_KEPT" "$FA3_SHA256" FA3
    else
        rm -f "$site"/sgl_kernel/flash_ops.abi3.so
    fi
    rm -f "$site"/sgl_kernel/flashmla_ops.abi3.so "$site"/sgl_kernel/infllm_ops.*.so
    rm -rf "$site"/sgl_kernel/sm100 "$site"/xgrammar/lib
    strip --strip-unneeded "$site"/xgrammar/libxgrammar_bindings.so   # its debug info: 51 of 53 MB
    "$PYTHON" scripts/gpu_prune_fatbin.py "$site/sgl_kernel/sm90/common_ops.abi3.so" "$WORK/pruned.so" 90
    mv "$WORK/pruned.so" "$site/sgl_kernel/sm90/common_ops.abi3.so"
}

# The GPU image's torch (the device's KINDS.md, and machine.txt of each call). SGLang's kernel
# package is C++ built against one torch's internal ABI, not torch's stable one, and SGLang pins
# that torch: a wheel pinning another would fail to import there ("undefined symbol"), after a
# 20-minute xz here. sglang 0.5.18-0.5.21 pin torch==2.13.0 and 0.5.22-0.5.23 torch==2.14.1;
# every sglang-kernel after 0.4.5 needs symbols torch 2.11.0 lacks (scripts/gpu_torch_abi.py),
# so 0.5.17 is the newest SGLang this image runs as released.
IMAGE_TORCH=2.11.0
check_torch_pin() {   # WHEEL...: none may pin a torch other than the image's
    local whl line
    for whl in "$@"; do
        line=$(unzip -p "$whl" '*.dist-info/METADATA' | grep -m1 -E '^Requires-Dist: torch ?\(?==' || true)
        [[ -z $line || $line =~ ==$IMAGE_TORCH[^.0-9]*$ ]] \
            || die "$(basename "$whl") says '$line'; the GPU image has torch $IMAGE_TORCH, which its code was not built for"
    done
}

bundle_engine() {
    # NAME@VERSION[+VARIANT]: the variant (fa3) is handed to trim_NAME; the bundle keeps the
    # engine's name, so the preset finds it.
    local name=${1%@*} version=${1#*@} variant=""
    [[ $version == *+* ]] && { variant=${version#*+}; version=${version%%+*}; }
    local lock=scripts/gpu-engines/$name-$version.txt
    # Built once per lock file, pruner and trim step, then copied: xz -9 of 340 MB takes 4 minutes here.
    local key built
    key=$({ cat "$lock" scripts/gpu_prune_fatbin.py; declare -f "trim_$name"; echo "$variant $FA3_KERNELS $FA3_SHA256 $MOE_KERNELS $MOE_SHA256"; } \
          | sha256sum | cut -c1-12)
    built="$CACHE/gpu-engines/$name-gpu-$version${variant:++$variant}-$key.tar.xz"
    mkdir -p "$GPU/engines"
    if [[ ! -f $built ]]; then
        local wheels="$CACHE/downloads/gpu-$name-$version" site=$WORK/$name/site
        mkdir -p "$wheels" "$(dirname "$built")"
        say "downloading $name $version's wheels (hashes in $lock)"
        "$PYTHON" -m pip download -q --no-deps --require-hashes "${GPU_PLATFORM[@]}" -d "$wheels" -r "$lock"
        local files=()
        while read -r spec _; do
            [[ $spec == \#* || -z $spec ]] && continue
            local pkg=${spec%%==*} ver=${spec#*==} found
            found=$(compgen -G "$wheels/${pkg//-/_}-$ver-*.whl" || compgen -G "$wheels/$pkg-$ver-*.whl") \
                || die "no wheel for $spec in $wheels"
            files+=("$(head -1 <<<"$found")")
        done <"$lock"
        check_torch_pin "${files[@]}"
        "$PYTHON" -m pip install -q --no-index --no-deps --no-compile "${GPU_PLATFORM[@]}" --target "$site" "${files[@]}"
        rm -rf -- "$site/bin"
        "trim_$name" "$site" "$variant"
        say "packing $name $version ($(du -sh "$site" | cut -f1) unpacked; xz -9 takes a few minutes)"
        tar -C "$WORK/$name" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - site \
            | xz -9 -T0 >"$built.part"
        mv "$built.part" "$built"
    fi
    cp "$built" "$GPU/engines/$name-gpu-$version.tar.xz"
    ENGINE_LINES+=("$name $version${variant:+ +$variant}: the wheels of $lock (sha256-pinned), trimmed, as $(basename "$built")")
}

# FlashInfer's modules for the sglang-gpu `flashinfer` profiles: the pack `scripts/gpu_run.sh
# flashinfer-jit` made on the device (one call, about 5 minutes), from FLASHINFER_JIT or else
# $CACHE/gpu-engines/ under the name scripts/gpu-flashinfer.sha256 pins, checked against that
# pin and copied into .gpu/ (gpu_run.sh checks it again and unpacks it). Without one the bundle
# is made as before, and the `flashinfer` profiles' servers stop at their first module.
bundle_flashinfer() {
    local pin=scripts/gpu-flashinfer.sha256 want name pack
    read -r want name < <(grep -v '^#' "$pin") || die "$pin pins nothing"
    pack=${FLASHINFER_JIT:-$CACHE/gpu-engines/$name}
    if [[ ! -f $pack ]]; then
        say "no FlashInfer pack at $pack: the flashinfer profiles need one (scripts/gpu_run.sh flashinfer-jit; see $pin)"
        return 0
    fi
    [[ $(sha256sum "$pack" | cut -d' ' -f1) == "$want" ]] || die "$pack does not have the sha256 $pin pins ($want)"
    cp "$pack" "$GPU/$name"
    ENGINE_LINES+=("FlashInfer's prebuilt JIT modules: $name (sha256 pinned in $pin)")
}

bundle_hf_model() {
    PYTHONPATH="$WORK/servefuzz" "$PYTHON" -m servefuzz model build "$WORK/model" --seed 0 >/dev/null   # the snapshot's
    mkdir -p "$GPU/models"
    cp -r "$WORK/model/hf-float32" "$GPU/models/"
}

# Each engine named has a lock file, before anything is downloaded or .gpu/ emptied.
for engine in "$@"; do
    base=${engine%%+*} variant=${engine#"$base"}
    [[ -z $variant || $engine == sglang@*+fa3 ]] || die "unknown variant in $engine (known: sglang@VERSION+fa3)"
    [[ $base == *@* && -f scripts/gpu-engines/${base%@*}-${base#*@}.txt ]] \
        || die "unknown engine $engine (known: $(cd scripts/gpu-engines && ls | sed 's/-\([0-9]\)/@\1/; s/\.txt$//' | tr '\n' ' '))"
done

start=$SECONDS
WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT
exclude_gpu_dir
rm -rf -- "$GPU"
mkdir -p "$GPU"
if (($#)); then
    ENGINE_LINES=()
    bundle_servefuzz
    bundle_hf_model
    bundle_wheels
    for engine in "$@"; do bundle_engine "$engine"; done
    [[ " $* " != *" sglang@"* ]] || bundle_flashinfer
    {
        echo "# made by scripts/gpu_bundle.sh $* on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        printf '%s\n' "${ENGINE_LINES[@]}"
        echo "servefuzz as committed at $(git rev-parse --short "$SNAPSHOT"); models: servefuzz model build --seed 0"
        (cd "$GPU" && find . -type f ! -name MANIFEST | sort | xargs sha256sum)
    } >"$GPU/MANIFEST"
    say "wrote $GPU ($(du -sh "$GPU" | cut -f1)) in $((SECONDS - start)) s"
    exit 0
fi
bundle_sources
bundle_servefuzz
bundle_model
bundle_settle
bundle_wheels
[[ ${RAY:-1} == 0 ]] || bundle_ray   # RAY=0: a bundle without Ray (the ray step then fails)
write_manifest
say "wrote $GPU ($(du -sh "$GPU" | cut -f1)) in $((SECONDS - start)) s"
