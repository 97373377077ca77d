#!/usr/bin/env bash
# vLLM 0.26.0's native KV offloading on the lent H200: the fresh-salt probe
# (scripts/gpu_offload_probe.py) on one server, beside `servefuzz replay` of the two offloading
# findings (docs/findings/vllm-gpu-kv-offloading-*) with servefuzz's current flush. Run from the
# repository root as DIR/gpu_offload.sh, DIR carried, holding: vllm-gpu-0.26.0.tar.xz (from
# `scripts/gpu_bundle.sh vllm@0.26.0`), hf-float32/ (the tiny model), servefuzz-src.tar.gz and
# wheels/ (the bundle's), gpu_offload_probe.py, leak.json and crash.json (the findings).
# Results go to $OUT (probe.txt, replay-*.txt, the probe server's log).
set -uo pipefail
D=$(dirname "$0")
W=/tmp/servefuzz-offload
OUT=${OUT:?set OUT}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
mkdir -p "$W/py" "$W/engine"
tar -xJf "$D/vllm-gpu-0.26.0.tar.xz" -C "$W/engine"
tar -xzf "$D/servefuzz-src.tar.gz" -C "$W/py"
python3 -c 'import jsonschema' 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$D"/wheels/*.whl
# The def-offload campaign's server (../shared/evidence/vllm-gpu-kv-offloading), port left open.
serve() {
    echo "env PYTHONPATH=$W/engine/site HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_HOST_IP=127.0.0.1" \
         "VLLM_SERVER_DEV_MODE=1 VLLM_NO_USAGE_STATS=1 python3 -m vllm.entrypoints.openai.api_server" \
         "--host 127.0.0.1 --port $1 --model $D/hf-float32 --served-model-name tiny --dtype bfloat16" \
         "--max-model-len 2048 --enable-prefix-caching --block-size 16 --kv-cache-memory-bytes 67108864" \
         "--enable-prompt-tokens-details --seed 0 --gpu-memory-utilization 0.15 --kv-offloading-size 1"
}
replay() {  # FINDING NAME: servefuzz replay on its own server
    PYTHONPATH=$W/py:$W/site python3 -m servefuzz replay "$D/$1" --engine vllm --runs "${RUNS:-5}" \
        --launch "$(serve '{port}')" >"$OUT/replay-$2.txt" 2>&1
    echo "rc=$?" >>"$OUT/replay-$2.txt"
}
replay leak.json leak & sleep 20
replay crash.json crash & sleep 20
$(serve 8011) >"$OUT/probe-server.log" 2>&1 &
for _ in $(seq 300); do curl -sf http://127.0.0.1:8011/health >/dev/null && break; sleep 1; done
python3 "$D/gpu_offload_probe.py" http://127.0.0.1:8011 tiny >"$OUT/probe.txt" 2>&1
echo "rc=$?" >>"$OUT/probe.txt"
wait %1 %2
PYTHONPATH=$W/engine/site python3 -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)' >"$OUT/versions.txt" 2>&1
echo done
