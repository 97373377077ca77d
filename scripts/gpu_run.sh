#!/usr/bin/env bash
# What runs on the lent GPU machine (the device tool), from the repository root, after
# scripts/gpu_bundle.sh has filled .gpu/ here. One device call, `.gpu` carried:
#
#   set -o pipefail; DEADLINE=570 scripts/gpu_run.sh build fuzz:exact:100 fuzz:stock:80 triage 2>&1 | tee $OUT/log
#
# (docs/gpu/README.md: what that found on an H200.)
#
# Steps, in the order given (each `fuzz` serves one profile and runs one campaign):
#   build                  build llama-server with CUDA for sm_90; skipped when already built
#   fuzz:PROFILE:SECONDS   serve PROFILE (see PROFILES below) and run `servefuzz fuzz` against it
#   triage                 replay each distinct finding under the triage matrix, one fresh server
#                          per row; attach the matrix to a copy of the finding
#   ray:SECONDS            issue 16's scale-out: `servefuzz fuzz --launch CMD` campaigns of at
#                          most SECONDS each, one after another with the same seed: the arms of
#                          ARMS (default `local ray-1 ray-2`: no Ray, `--ray local --workers 1`,
#                          `--workers 2`, each worker with GPUS_PER_WORKER=1 GPU and its own
#                          llama-server of the `exact` profile). Per arm: its rates, its wall
#                          time, the driver's CPU time, and for every server the
#                          CUDA_VISIBLE_DEVICES it inherited from its actor, the GPU nvidia-smi
#                          sees it on and each GPU's memory while all of the arm's servers run
#                          (results/scaleout-*/scaleout.json, the summary's table)
#   ray-triage             `servefuzz triage --ray local --parallel 2` of one finding (the last
#                          scale-out run's worst, else issue 15's stored CUDA finding), each row a
#                          Ray task with its own server on its own GPU (results/ray-triage*/)
#   summary                nothing but the summary and the pack (on results already there)
#   flashinfer-jit         FlashInfer's JIT modules for the sglang-gpu `flashinfer` profiles, compiled
#                          once (about 4 minutes) and packed as $OUT/flashinfer-jit-VERSION-ARCH.tar.xz
#                          with its sha256 (pin it in scripts/gpu-flashinfer.sha256; gpu_bundle.sh
#                          puts the pack into .gpu/, and every later call unpacks it, checked)
#   launch:PRESET:PROFILE:SECONDS[:ARCH[:BUILD]]
#                          `servefuzz fuzz --launch PRESET --profile PROFILE` for SECONDS (with ARCH:
#                          `--model-arch ARCH`, servefuzz's tiny model of that architecture, built
#                          on the machine, in campaign-PRESET-PROFILE-ARCH; with BUILD also
#                          `--model-build BUILD`, e.g. speculative, in ...-ARCH-BUILD): an
#                          engine of a bundle made by `scripts/gpu_bundle.sh vllm@0.26.0` (or
#                          sglang@0.5.17), unpacked into the engine cache on first use, started,
#                          owned and restarted by servefuzz as on the CPU (`vllm-gpu`,
#                          `sglang-gpu`); its controls run there too. In campaign-PRESET-PROFILE
#   user:PRESET:PROFILE:SECONDS
#                          the same as a user with the engine installed runs it: the bundle's site
#                          on servefuzz's PYTHONPATH, an empty engine cache (campaign-user-PRESET-PROFILE)
#   noise:PRESET           bench/judgeable_noise.py --preset PRESET $NOISE_ARGS (issue 51: the
#                          agreeing-token noise of each tiny architecture's numerics and judgeable
#                          builds beside the dense llama, bfloat16), the working tree's servefuzz;
#                          rows in judgeable-noise-PRESET.jsonl, the log beside them
#   STEP+STEP              the steps at once (two engines side by side on the one GPU), e.g.
#                          launch:vllm-gpu:default:400+launch:sglang-gpu:default:400
#
# An engine bundle's device calls, back to back while the machine stays warm (30 s):
#   scripts/gpu_bundle.sh vllm@0.26.0     # here
#   device run, carry .gpu: DEADLINE=570 scripts/gpu_run.sh launch:vllm-gpu:default:420 2>&1 | tee $OUT/log
# Every run ends by packing the results into $OUT (summary.md, results.tar.gz and each campaign's
# histories as campaign-*-histories.jsonl.xz). The work folder
# (default /tmp/servefuzz-gpu) outlives the call while the machine stays warm, so a follow-up
# call skips the build and adds to the same results: a fuzz step whose campaign folder already
# holds a campaign of the same seed continues it (`servefuzz fuzz --resume`); another seed starts
# a new campaign in campaign-PROFILE-seedN. The summary reads each campaign's own figures
# (progress.json, findings/), so a campaign cut short still shows what it did. A servefuzz that
# exits with anything but 0 (nothing found) or 1 (found something) crashed: its exit status and
# stderr tail go to the campaign's crash.json and the summary, the remaining steps still run, and
# gpu_run.sh exits 3 after packing.
#
# Knobs (environment): OUT (where results go; the device tool sets it), SERVEFUZZ_GPU_WORK,
# JOBS=16, SLOTS=8, SEED=0, REPLAY_RUNS=10, MAX_FINDINGS=2 (per campaign), FUZZ_EXTRA (more
# arguments for `servefuzz fuzz`, word-split), DEADLINE (seconds
# from the start: campaigns are shortened and triage stops so that the results are packed by
# then), LLAMA_SERVER (use this binary instead of building one: a dry run on a CPU machine),
# ARMS, GPUS_PER_WORKER=1 (0 for a dry run on a CPU machine), TRIAGE_RUNS=5 (the ray steps),
# STAGGER_S=0 (seconds between the starts of the steps of one STEP+STEP).
# The ray steps need Ray: the bundle's .gpu/ray-*-cp312.tar.xz, unpacked into the work folder.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
W=${SERVEFUZZ_GPU_WORK:-/tmp/servefuzz-gpu}
OUT=${OUT:?set OUT to the folder results go to}
COMMIT=$(sed -n 's/^LLAMA_CPP_COMMIT=\([0-9a-f]*\).*/\1/p' scripts/setup_engines.sh)
export SERVEFUZZ_CACHE=$W/cache   # servefuzz.engine_files finds llama-server here
BIN=$SERVEFUZZ_CACHE/llama.cpp-$COMMIT/llama-server
RESULTS=$W/results
# No NVLink multicast, ever: it can take the host's shared GPUs down (the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
END=$((SECONDS + ${DEADLINE:-86400}))
export UNTIL=$(( $(date +%s) + ${DEADLINE:-86400} ))   # the same deadline as an epoch, for the Python half

say() { printf '[gpu_run %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { say "error: $*" >&2; exit 1; }

# servefuzz from the bundle's snapshot; the wheels only for what this python3 lacks.
setup_python() {
    [[ -f .gpu/servefuzz-src.tar.gz ]] || die ".gpu/ is missing: run scripts/gpu_bundle.sh here and carry .gpu"
    rm -rf -- "$W/py" && mkdir -p "$W/py" "$RESULTS"
    tar -xzf .gpu/servefuzz-src.tar.gz -C "$W/py"
    if ! python3 -c 'import jsonschema' 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$W/site" .gpu/wheels/*.whl
    fi
    # Ray (the ray steps) from the bundle's trimmed wheel, unpacked once per machine (about 10 s).
    if ! python3 -c 'import ray' 2>/dev/null && [[ ! -f $W/site/ray/__init__.py ]] && compgen -G '.gpu/ray-*-cp312.tar.xz' >/dev/null; then
        mkdir -p "$W/site" && tar -xJf .gpu/ray-*-cp312.tar.xz -C "$W/site"
    fi
    export PYTHONPATH=$W/py:$W/site
    python3 -m servefuzz --version
    unpack_engines
}

# An engine bundle's site/ into the engine cache, where the `vllm-gpu` / `sglang-gpu` presets
# look (servefuzz.engine_files.installed), with the interpreter it was built for; the bundled
# model where the presets' default model lives, as `servefuzz model build --seed 0` made it
# (so the truth control knows it is servefuzz's own). Once per machine: the cache outlives a call.
unpack_engines() {
    local bundle name dir
    for bundle in .gpu/engines/*-gpu-*.tar.xz; do
        [[ -f $bundle ]] || continue
        name=$(basename "$bundle" .tar.xz)
        dir=$SERVEFUZZ_CACHE/$name
        [[ -f $dir/.complete ]] && continue
        rm -rf -- "$dir" && mkdir -p "$dir"
        tar -xJf "$bundle" -C "$dir"
        command -v python3 >"$dir/python"
        touch "$dir/.complete"
        say "unpacked $name into $dir"
    done
    local models=$SERVEFUZZ_CACHE/models/tiny-seed0
    if [[ -d .gpu/models/hf-float32 && ! -f $models/.complete ]]; then
        rm -rf -- "$models" && mkdir -p "$models"
        cp -r .gpu/models/hf-float32 "$models/" && touch "$models/.complete"
    fi
    unpack_flashinfer
}

# The user: step (issue 55): `servefuzz fuzz --launch PRESET` as a user runs it on a machine with
# the engine installed: the bundle's unpacked site on servefuzz's own PYTHONPATH (as a pip install
# would put it), an engine cache of its own with nothing in it (so no bundle, no prebuilt model:
# servefuzz finds the engine through its interpreter and builds its model). The campaign's
# config.json records where the engine came from.
user_install() {
    local preset=$1 profile=$2 seconds=$3 site out
    site=$(compgen -G "$SERVEFUZZ_CACHE/$preset-*/site" | head -1) \
        || die "the user: step needs a $preset bundle in .gpu/engines/"
    out=$RESULTS/campaign-user-$preset-$profile
    mkdir -p "$out" && rm -rf -- "$W/user-cache" && mkdir -p "$W/user-cache"
    (cd "$W" && SERVEFUZZ_CACHE=$W/user-cache PYTHONPATH=$W/py:$site:$W/site HF_HUB_OFFLINE=1 \
        timeout -s INT -k 30 $(( UNTIL - $(date +%s) - 60 )) python3 -m servefuzz fuzz --launch "$preset" --profile "$profile" --keep-going --time "$seconds" \
        --seed "${SEED:-0}" --out "$out" --json >"$out/fuzz.json" 2>"$out/fuzz.stderr") \
        || say "the user's-install campaign exited $? (0: nothing found, 1: found): $(tail -c 300 "$out/fuzz.stderr")"
    printf '{"preset": "%s", "profile": "%s", "arch": "llama", "user_install": true}\n' "$preset" "$profile" >"$out/launched.json"
    say "user:$preset/$profile: $(drive digest "$out/fuzz.json")"
}

# FlashInfer's JIT modules, made once by the flashinfer-jit step and pinned by sha256 in
# scripts/gpu-flashinfer.sha256, into the AOT folder of each SGLang bundle's FlashInfer
# (flashinfer/data/aot: FLASHINFER_AOT_DIR when no flashinfer-jit-cache package is installed,
# 0.6.15's jit/env.py), where its JitSpec.build_and_load loads a module without building it. The
# `flashinfer` profiles set FLASHINFER_DISABLE_JIT, so a module missing here stops their server.
unpack_flashinfer() {
    local pack pin=scripts/gpu-flashinfer.sha256 want got version site
    pack=$(compgen -G '.gpu/flashinfer-jit-*.tar.xz' | head -1) || return 0
    [[ -f $pin ]] || die "$pack is not pinned: $pin is missing"
    want=$(awk -v f="${pack##*/}" '$2 == f { print $1 }' "$pin")
    got=$(sha256sum "$pack" | cut -d' ' -f1)
    [[ -n $want && $got == "$want" ]] || die "$pack has sha256 $got; $pin pins ${want:-no file of that name}"
    version=${pack##*/flashinfer-jit-}; version=${version%-*}
    for site in "$SERVEFUZZ_CACHE"/sglang-gpu-*/site; do
        [[ -d $site/flashinfer_python-$version.dist-info ]] || { say "not for $site: its FlashInfer is not $version"; continue; }
        mkdir -p "$site/flashinfer/data/aot" && tar -xJf "$pack" -C "$site/flashinfer/data/aot"
        say "FlashInfer modules of ${pack##*/} (sha256 pinned) in $site/flashinfer/data/aot"
    done
}

# The flashinfer-jit step: FlashInfer's modules for the `flashinfer` profiles, compiled once by
# the image's nvcc (254 s on the H200) and packed. One SGLang server per profile, with the
# preset's flags (scripts/gpu_run.sh cannot import them: servefuzz's gpu_argv is the truth; the
# modules depend on dtype, head dim and the backend, not on the pool), each compiling into the
# same fresh FLASHINFER_WORKSPACE_BASE (FlashInfer locks each module while it builds), answering
# a prompt, a 300-token prompt twice (the second an extend after a radix hit) and 8 at once
# (batched decode), then stopped. The modules, laid out as the AOT folder wants them
# (NAME/NAME.so), go into $OUT/flashinfer-jit-VERSION-ARCH.tar.xz; its sha256 line is printed and
# written beside it, for scripts/gpu-flashinfer.sha256. A server that does not come up fails the step.
flashinfer_jit() {
    local complete dir site python model=$SERVEFUZZ_CACHE/models/tiny-seed0/hf-float32 ws=$W/flashinfer-jit
    complete=$(compgen -G "$SERVEFUZZ_CACHE/sglang-gpu-*/.complete" | head -1) \
        || die "flashinfer-jit needs an SGLang bundle in .gpu/: scripts/gpu_bundle.sh sglang@0.5.17"
    dir=$(dirname "$complete"); site=$dir/site; python=$(cat "$dir/python")
    [[ -f $model/config.json ]] || die "flashinfer-jit needs the bundle's model (.gpu/models/hf-float32)"
    compgen -G "$site/flashinfer/data/aot/*/*.so" >/dev/null && die "$site already has FlashInfer modules: flashinfer-jit runs on a machine without them"
    rm -rf -- "$ws" && mkdir -p "$ws"
    local port=8310 pids=() ports=() extra t0=$SECONDS
    for extra in "" "--enable-deterministic-inference"; do
        FLASHINFER_WORKSPACE_BASE=$ws PYTHONPATH=$site HF_HUB_OFFLINE=1 "$python" -m sglang.launch_server \
            --model-path "$model" --host 127.0.0.1 --port "$port" --attention-backend flashinfer \
            --sampling-backend pytorch --dtype bfloat16 --mem-fraction-static 0.8 --max-total-tokens 262144 \
            --page-size 1 --random-seed 0 --enable-metrics $extra >"$OUT/flashinfer-jit-$port.log" 2>&1 &
        pids+=($!) ports+=("$port"); port=$((port + 1))
        sleep 20   # SGLang sizes its pool from the memory free at its start: one at a time
    done
    local long i ok=1 up labels=(plain deterministic) curls
    long=$(seq -s, 5 304)
    for i in 0 1; do
        port=${ports[$i]} up=""
        while (( SECONDS < END - 40 )) && kill -0 "${pids[$i]}" 2>/dev/null; do
            curl -sf "127.0.0.1:$port/health" >/dev/null && { up=1; break; }
            sleep 2
        done
        if [[ -z $up ]]; then say "flashinfer-jit: the server on $port did not come up"; ok=0; continue; fi
        say "flashinfer-jit: server $port (${labels[$i]}) up after $((SECONDS - t0)) s"
        # Each answer to its own file: the 8 at once would interleave on one.
        complete_one() { curl -s "127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\":\"t\",\"prompt\":[$1],\"max_tokens\":16,\"temperature\":0}" >"$W/fi-answer-$2"; echo >>"$W/fi-answer-$2"; }
        rm -f -- "$W"/fi-answer-*
        complete_one 5,6,7,8,9,10,11,12 00; complete_one "$long" 01; complete_one "$long" 02
        curls=()
        for p in 13 14 15 16 17 18 19 20; do complete_one "$long,$p" "$p" & curls+=($!); done
        wait "${curls[@]}"   # not the servers
        cat "$W"/fi-answer-* >"$OUT/flashinfer-jit-$port.answers.jsonl"
        say "flashinfer-jit: server $port answered $(grep -c '"finish_reason"' "$OUT/flashinfer-jit-$port.answers.jsonl" || true) of 11 requests"
    done
    for i in 0 1; do kill "${pids[$i]}" 2>/dev/null || true; done
    for i in 0 1; do wait "${pids[$i]}" 2>/dev/null || true; done
    local ops name
    ops=$(compgen -G "$ws/.cache/flashinfer/*/*/cached_ops" | head -1) || die "FlashInfer compiled nothing under $ws"
    name=flashinfer-jit-$(basename "$(dirname "$(dirname "$ops")")")-$(basename "$(dirname "$ops")").tar.xz
    (cd "$ops" && find . -mindepth 2 -maxdepth 2 -name '*.so' | sed 's|^\./||' | sort) >"$W/flashinfer-jit.list"
    say "flashinfer-jit: $(wc -l <"$W/flashinfer-jit.list") modules compiled in $((SECONDS - t0)) s:"
    sed 's/^/    /' "$W/flashinfer-jit.list"
    tar -C "$ops" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - -T "$W/flashinfer-jit.list" \
        | xz -9 -T0 >"$OUT/$name"
    (cd "$OUT" && sha256sum "$name" | tee "$name.sha256")
    (( ok )) || die "flashinfer-jit: a server did not come up; $name holds what was compiled"
}

build() {
    # scripts/gpu_build.sh: the CUDA build (or LLAMA_SERVER's binary), skipped when already there
    SERVEFUZZ_GPU_WORK=$W scripts/gpu_build.sh >/dev/null
    [[ -x $BIN ]] || die "no llama-server at $BIN after the build step"
}

record_machine() {
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
        nvcc --version 2>&1 | tail -1 || true
        [[ -x $BIN ]] && { "$BIN" --version 2>&1 | grep -iE 'version|built|CUDA|device' || true; }
        python3 --version
        python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || true
        local engine
        for engine in "$SERVEFUZZ_CACHE"/*-gpu-*/.complete; do
            [[ -f $engine ]] && echo "engine: $(basename "$(dirname "$engine")")"
        done
        return 0
    } >"$RESULTS/machine.txt"
    cat "$RESULTS/machine.txt"
}

# The bundle as gpu_bundle.sh wrote it: every file its MANIFEST lists, by checksum (a dry run on
# a CPU machine stops here when something is missing or changed).
check_manifest() {
    [[ -f .gpu/MANIFEST ]] || die ".gpu/MANIFEST is missing: run scripts/gpu_bundle.sh"
    (cd .gpu && grep -v '^#' MANIFEST | grep '  \./' | sha256sum --quiet -c -) || die ".gpu/ does not match its MANIFEST"
    say "bundle: $(head -1 .gpu/MANIFEST | sed 's/^# //'); $(grep -c '  \./' .gpu/MANIFEST) files match the manifest"
}

pack() {
    mkdir -p "$OUT"
    drive summary
    cp "$RESULTS/summary.md" "$OUT/summary.md"
    # A file comes back only under 16 MB: the campaigns' histories, most of the bytes, travel
    # apart and xz'd (240 s of fuzzing wrote 32 MB of JSONL, 4.4 MB xz'd).
    tar -C "$W" --exclude=results/slots --exclude=histories.jsonl -czf "$OUT/results.tar.gz" results
    local c
    for c in "$RESULTS"/campaign-*; do
        [[ -f $c/histories.jsonl ]] && xz -T0 -6 -c "$c/histories.jsonl" >"$OUT/${c##*/}-histories.jsonl.xz"
    done
    say "packed into $OUT: $(cd "$OUT" && du -ch results.tar.gz ./*.xz 2>/dev/null | tail -1 | cut -f1)"
}

# The Python half: serving, fuzzing, triage and the summary, through servefuzz's own modules.
drive() {
    ROOT=$ROOT GGUF=$ROOT/.gpu/tiny.gguf RESULTS=$RESULTS python3 - "$@" <<'PY'
import asyncio, dataclasses, json, os, shlex, signal, subprocess, sys, threading, time
from pathlib import Path

from servefuzz import engine_files
from servefuzz.engines.llamacpp import server_argv
from servefuzz.finding import Finding, Triage, TriageOutcome, load_finding
from servefuzz.history import RunHistory, read_history_jsonl, write_history_jsonl
from servefuzz.launcher import ServerProcess
from servefuzz.oracles import liveness
from servefuzz.replay_report import render_replay_report, replay_result
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target

GGUF, RESULTS, ROOT = Path(os.environ["GGUF"]), Path(os.environ["RESULTS"]), Path(os.environ["ROOT"])
SLOTS, RUNS = int(os.environ.get("SLOTS", "8")), int(os.environ.get("REPLAY_RUNS", "10"))
# Flags on top of servefuzz.engines.llamacpp.server_argv, which sets `-fa off -ctk f32 -ctv f32`;
# llama.cpp reads its flags in order, so a later one wins.
PROFILES = {
    "exact": (),  # servefuzz's most reproducible setting: no flash attention, f32 KV cache
    "stock": ("-fa", "auto", "-ctk", "f16", "-ctv", "f16"),  # llama.cpp's own GPU defaults
}


def server(profile: str, log: Path, *, slots: int = SLOTS, flags=(), env=None) -> ServerProcess:
    (RESULTS / "slots").mkdir(exist_ok=True)  # the slot erase that flushes the cache needs it
    extra = ("-ngl", "99", "--slot-save-path", str(RESULTS / "slots"), "--cache-ram", "0", *PROFILES[profile], *flags)
    argv = server_argv(engine_files.program("llama-server"), GGUF, slots=slots, ctx=8192, threads=4, extra=extra)
    return ServerProcess(argv, log_path=log, env=env, start_timeout_s=120)


def campaign_dir(profile: str, seed: str) -> tuple[Path, bool]:
    """Where this profile's campaign of this seed lives, and whether it is to be resumed: the
    plain folder when it is free or holds this seed, else campaign-PROFILE-seedN."""
    for out in (RESULTS / f"campaign-{profile}", RESULTS / f"campaign-{profile}-seed{seed}"):
        config = out / "config.json"
        if not config.exists() and not (out / "progress.json").exists():
            return out, False
        if config.exists() and str(json.loads(config.read_text()).get("seed")) == seed:
            return out, True
    raise SystemExit(f"no campaign folder left for profile {profile}, seed {seed}")


def fuzz(profile: str, seconds: str) -> None:
    seed = os.environ.get("SEED", "0")
    out, resume = campaign_dir(profile, seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "crash.json").unlink(missing_ok=True)
    with server(profile, out / "server.log") as srv:
        cmd = [sys.executable, "-m", "servefuzz", "fuzz", "--url", srv.base_url, "--engine", "llamacpp",
               "--keep-going", "--time", seconds, "--seed", seed, "--out", str(out), "--json",
               *(["--resume"] if resume else []), *os.environ.get("FUZZ_EXTRA", "").split()]
        print("$", " ".join(cmd), flush=True)
        with open(out / "fuzz.stderr", "a") as err:
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        (out / "fuzz.json").write_text(done.stdout)
        print(done.stdout, flush=True)
        if done.returncode not in (0, 1):  # 0: nothing found; 1: found something; anything else: a crash
            tail = (out / "fuzz.stderr").read_text(errors="replace")[-3000:]
            (out / "crash.json").write_text(json.dumps({"exit": done.returncode, "command": cmd, "stderr_tail": tail}, indent=2))
            print(f"CRASH: servefuzz fuzz exited with {done.returncode}; stderr tail:\n{tail}", flush=True)
            return
        warm_replays(out, srv.base_url)


def launched(preset: str, profile: str, seconds: str, arch: str = "", build: str = "") -> None:
    """`servefuzz fuzz --launch PRESET --profile PROFILE [--model-arch ARCH] [--model-build
    BUILD]`: servefuzz starts the engine, owns it (restarts it after a crash) and runs its
    controls on fresh servers of the same preset."""
    seed = os.environ.get("SEED", "0")
    out, resume = campaign_dir(f"{preset}-{profile}" + (f"-{arch}" if arch else "") + (f"-{build}" if build else ""), seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "crash.json").unlink(missing_ok=True)
    (out / "launched.json").write_text(json.dumps({"preset": preset, "profile": profile, "arch": arch or "llama",
                                                   **({"build": build} if build else {})}))
    cmd = [sys.executable, "-m", "servefuzz", "fuzz", "--launch", preset, "--profile", profile,
           *(["--model-arch", arch] if arch else []), *(["--model-build", build] if build else []), "--keep-going",
           "--time", seconds, "--seed", seed, "--out", str(out), "--json",
           *(["--resume"] if resume else []), *os.environ.get("FUZZ_EXTRA", "").split()]
    print("$", " ".join(cmd), flush=True)
    with open(out / "fuzz.stderr", "a") as err:
        done = until_deadline(cmd, err)
    (out / "fuzz.json").write_text(done.stdout)
    print(f"{preset}/{profile}{'/' + arch if arch else ''}: exit {done.returncode}; {digest(done.stdout)}", flush=True)
    if done.returncode not in (0, 1):
        tail = (out / "fuzz.stderr").read_text(errors="replace")[-3000:]
        (out / "crash.json").write_text(json.dumps({"exit": done.returncode, "command": cmd, "stderr_tail": tail}, indent=2))
        print(f"CRASH: servefuzz fuzz exited with {done.returncode}; stderr tail:\n{tail}", flush=True)


def until_deadline(cmd: list[str], err) -> subprocess.CompletedProcess[str]:
    """Run `cmd`, but stop it (SIGINT first: servefuzz then stops its server and writes its
    summary) at the call's deadline less 60 s, so that the pack still comes: a server's start
    may wait longer than the step's own share (NemotronH's FlashInfer autotune sat 420 s)."""
    left = float(os.environ.get("UNTIL", "0")) - time.time() - 60 if os.environ.get("UNTIL") else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        stdout, _ = proc.communicate(timeout=max(left, 5) if left is not None else None)
    except subprocess.TimeoutExpired:
        print(f"deadline: stopping {' '.join(cmd[3:9])}", flush=True)
        proc.send_signal(signal.SIGINT)
        try:
            stdout, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, "")


def digest(stdout: str) -> str:
    """What a campaign's `--json` says in the few lines a call's output tail can hold: requests,
    the engine's meters (what was exercised), the goals left at zero and the verdicts."""
    try:
        r = json.loads(stdout)
    except ValueError:
        return stdout[-800:]
    verdicts: dict[str, int] = {}
    for f in r.get("findings", []):
        verdicts[f.get("verdict", "?")] = verdicts.get(f.get("verdict", "?"), 0) + f.get("count", 1)
    lines = [f"{r.get('requests')} requests, {r.get('elapsed_s')} s, stop {r.get('stop_reason')}, "
             f"restarts {r.get('restarts')}, verdicts {verdicts or 'none'}"]
    lines += ["  " + line for line in (r.get("exercise") or {}).get("lines", [])]
    lines += ["  unreached: " + u for u in r.get("unreached", [])]
    return "\n".join(lines)


def warm_replays(campaign: Path, url: str) -> None:
    """Replay the campaign's worst findings on the server that produced them, before it stops.

    Triage starts a fresh server for every row; a finding that comes back here but not there
    depends on state the server built up during the campaign.
    """
    rows = {}
    (campaign / "warm-replays").mkdir(exist_ok=True)
    for path, finding in worst_findings(campaign, int(os.environ.get("MAX_FINDINGS", "2"))):
        runs = asyncio.run(replay(finding, url, True))
        write_history_jsonl(campaign / "warm-replays" / f"{path.stem}.jsonl", runs)
        rows[path.name] = {"rate": f"{reproduced(finding, runs)}/{RUNS}", "jitter_max": jitter(runs)}
        print(f"warm replay {path.stem}: {rows[path.name]}", flush=True)
    (campaign / "warm-replays.json").write_text(json.dumps(rows, indent=2))


def worst_findings(campaign: Path, limit: int, skip: set[str] = frozenset()):
    """Findings of distinct signatures, the most severe and best confirmed first, until `limit`
    signatures (those in `skip`, already dealt with, included) are covered."""
    found = [(p, load_finding(p)) for p in sorted((campaign / "findings").glob("finding_*.json"))]
    rank = lambda pf: (pf[1].verdict.rank, -(pf[1].confirmation.reproduced if pf[1].confirmation else 0))
    seen, picked = set(skip), []
    for path, finding in sorted(found, key=rank):
        if finding.signature not in seen and len(seen) < limit:
            seen.add(finding.signature)
            picked.append((path, finding))
    return picked


def matrix(profile: str):
    """(name, flags, env, slots, cache_prompt, component) of each triage row; the first is the baseline."""
    fa = ("-fa", "on") if profile == "exact" else ("-fa", "off")
    kv = ("-ctk", "f16", "-ctv", "f16") if profile == "exact" else ("-ctk", "f32", "-ctv", "f32")
    return [
        ("as found", (), {}, SLOTS, True, ""),
        ("-np 1", ("-np", "1"), {}, 1, True, "batching across slots"),
        ("cache_prompt: false", (), {}, SLOTS, False, "slot prompt cache"),
        (" ".join(fa), fa, {}, SLOTS, True, "flash-attention kernels"),
        ("--kv-unified", ("--kv-unified",), {}, SLOTS, True, "unified KV buffer"),
        ("GGML_CUDA_DISABLE_GRAPHS=1", (), {"GGML_CUDA_DISABLE_GRAPHS": "1"}, SLOTS, True, "CUDA graphs"),
        # Hopper only: a kernel may start before the one it depends on has finished.
        ("GGML_CUDA_PDL=0", (), {"GGML_CUDA_PDL": "0"}, SLOTS, True, "programmatic dependent launch"),
        ("GGML_CUDA_DISABLE_FUSION=1", (), {"GGML_CUDA_DISABLE_FUSION": "1"}, SLOTS, True, "fused kernels"),
        # Prompts of over 512 tokens are split into micro-batches of 512 by default.
        ("-ub 1024", ("-ub", "1024"), {}, SLOTS, True, "prompt split into micro-batches"),
        (" ".join(kv), kv, {}, SLOTS, True, "KV cache precision"),
    ]


async def replay(finding: Finding, url: str, cache_prompt: bool) -> list[RunHistory]:
    """`servefuzz replay`, with the llamacpp target's cache_prompt switch (the CLI has none)."""
    async with Runner(make_target("llamacpp", url, cache_prompt=cache_prompt), RunConfig()) as runner:
        runs = []
        for i in range(RUNS):
            await runner.flush()
            runs.append(await runner.run(finding.scenario, run=i, label="load"))
        specs = finding.scenario.by_id()
        alone = [await runner.run_alone(specs[rid], run=RUNS) for rid in finding.expected_diverging if rid in specs]
        return [*runs, RunHistory(RUNS, "alone", tuple(alone))]


def reproduced(finding: Finding, runs: list[RunHistory]) -> int:
    """Load runs that showed the finding again: an expected request answering other than it did
    alone, or for a crash, hang or error finding, that same failure."""
    loaded = runs[:-1]
    if not finding.verdict.is_divergence:
        return sum(any(a.verdict is finding.verdict for a in liveness([h])) for h in loaded)
    key = lambda rec: tuple(c.token_ids for c in rec.choices)
    alone = {r.request_id: key(r) for r in runs[-1].records if r.ok}
    return sum(any(key(r) != alone[r.request_id] for r in h.records if r.ok and r.request_id in alone) for h in loaded)


def jitter(runs: list[RunHistory]) -> float:
    """The largest change of a chosen token's logprob where two runs of a request still agree:
    how far this server's numerics move between runs (a flip with a smaller margin is a tie)."""
    outs: dict[str, list] = {}
    for h in runs:
        for r in h.records:
            if r.ok and r.choices:
                outs.setdefault(r.request_id, []).append(r.choices[0])
    deltas = [0.0]
    for first, *others in outs.values():
        for o in others:
            for ta, la, tb, lb in zip(first.token_ids, first.logprobs, o.token_ids, o.logprobs):
                if ta != tb:
                    break
                if la is not None and lb is not None:
                    deltas.append(abs(la - lb))
    return max(deltas)


def triage(max_findings: str) -> None:
    until = float(os.environ.get("TRIAGE_UNTIL", "inf"))
    for campaign in sorted(RESULTS.glob("campaign-*")):
        if (campaign / "launched.json").exists():
            continue  # an engine preset's campaign: `servefuzz triage --launch PRESET` has its matrix
        profile = campaign.name.removeprefix("campaign-")
        done = {load_finding(p).signature for p in (campaign / "triaged").glob("finding_*.json")}
        for path, finding in worst_findings(campaign, int(max_findings), skip=done):
            where = campaign / "triage" / path.stem
            where.mkdir(parents=True, exist_ok=True)
            rows, evidence = [], []
            for name, flags, env, slots, cache_prompt, component in matrix(profile):
                if time.time() > until:
                    print(f"triage: out of time before {path.stem} / {name}", flush=True)
                    break
                slug = "".join(c if c.isalnum() else "_" for c in name).strip("_")
                try:
                    with server(profile, where / f"server-{slug}.log", slots=slots, flags=flags, env=env) as srv:
                        runs = asyncio.run(replay(finding, srv.base_url, cache_prompt))
                except Exception as e:  # a row that cannot run is a row with an error, not a lost triage
                    rows.append(TriageOutcome(name, flags, env, component, error=f"{type(e).__name__}: {e}"))
                    continue
                result = dataclasses.replace(replay_result(finding, runs), runs=RUNS)
                (where / f"replay-{slug}.txt").write_text(render_replay_report(result))
                write_history_jsonl(where / f"replay-{slug}.jsonl", runs)
                rows.append(TriageOutcome(name, flags, env, component, reproduced(finding, runs), RUNS))
                evidence.append({"row": name, "rate": rows[-1].rate, "jitter_max": jitter(runs),
                                 "diverged": {d.request_id: f"{d.verdict.value}: {d.why}" for d in result.diverged}})
                print(f"triage {path.stem} [{name}]: {rows[-1].rate}, jitter {evidence[-1]['jitter_max']:.2g}, "
                      f"diverged {list(evidence[-1]['diverged'])}", flush=True)
            (where / "rows.json").write_text(json.dumps(evidence, indent=2))
            if rows:
                triaged = dataclasses.replace(finding, triage=Triage(rows[0], tuple(rows[1:])))
                (campaign / "triaged").mkdir(exist_ok=True)
                (campaign / "triaged" / path.name).write_text(json.dumps(triaged.to_json(), indent=2))


# -- scale-out on Ray (issue 16): `servefuzz fuzz --ray local --workers N`, one server per GPU --

GPUS_PER_WORKER = os.environ.get("GPUS_PER_WORKER", "1")  # 0: a CPU dry run (no GPU to hand out)
ARM_ARGS = {
    "local": [],  # no Ray: `servefuzz fuzz --launch` owns one server, the base of the driver's overhead
    "ray-1": ["--ray", "local", "--workers", "1", "--gpus-per-worker", GPUS_PER_WORKER],
    "ray-2": ["--ray", "local", "--workers", "2", "--gpus-per-worker", GPUS_PER_WORKER],
}
# What one arm costs beyond its --time: Ray's local cluster and the servers start, the last
# scenario's confirmation, the cluster's shutdown.
ARM_OVERHEAD_S = 45


def launch_command() -> str:
    """The `exact` profile's server (the fuzz step's) as a `--launch` command with {port}: every
    worker starts its own."""
    (RESULTS / "slots").mkdir(exist_ok=True)  # the slot erase writes nothing there: shared is fine
    extra = ("-ngl", "99", "--slot-save-path", str(RESULTS / "slots"), "--cache-ram", "0", *PROFILES["exact"])
    return shlex.join(server_argv(engine_files.program("llama-server"), GGUF, slots=SLOTS, ctx=8192, threads=4, extra=extra))


def nvidia_smi(*query: str) -> list[list[str]]:
    try:
        done = subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines() if line.strip()]


def environ_of(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(e.split("=", 1) for e in raw.decode(errors="replace").split("\0") if "=" in e)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of one process (not its children), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Monitor:
    """Samples, every 2 s while a command runs: each server of the arm (its server.json) with
    the CUDA_VISIBLE_DEVICES it inherited from its actor, nvidia-smi's processes and memory per
    GPU, and the driver's CPU time. The point to show: one server per GPU."""

    def __init__(self, out: Path, driver: int) -> None:
        self.out, self.driver, self.samples = out, driver, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.wait(2.0):
            self.samples.append(self.sample())

    def sample(self) -> dict:
        gpus = {u: {"index": int(i), "mem_used_mib": int(m), "util": int(g)} for i, u, m, g in
                (r for r in nvidia_smi("--query-gpu=index,uuid,memory.used,utilization.gpu") if len(r) == 4)}
        apps = {int(p): {"gpu": gpus.get(u, {}).get("index"), "mem_mib": int(m)} for p, u, m in
                (r for r in nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory") if len(r) == 3)
                if p.isdigit() and m.isdigit()}
        servers = {}
        for state in sorted(self.out.glob("**/server.json")):
            try:
                pid = int(json.loads(state.read_text())["pid"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            env = environ_of(pid)
            name = state.parent.name if state.parent != self.out else "local"
            servers[name] = {"pid": pid, "alive": bool(env), "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES"),
                             **apps.get(pid, {})}
        for pid, app in apps.items():  # a server with no server.json (a triage row's): by its GPU process
            if all(v["pid"] != pid for v in servers.values()):
                env = environ_of(pid)
                servers[f"pid{pid}"] = {"pid": pid, "alive": bool(env), "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES"),
                                        **app}
        return {"t": round(time.time(), 1), "driver_cpu_s": cpu_seconds(self.driver), "servers": servers,
                "gpus": {str(g["index"]): {"mem_used_mib": g["mem_used_mib"], "util": g["util"]} for g in gpus.values()},
                "gpu_apps": {str(p): a for p, a in apps.items()}}

    def finish(self) -> dict:
        """The samples, kept in gpu-samples.jsonl, and what they say (`placement`)."""
        self.stop.set()
        self.thread.join()
        with open(self.out / "gpu-samples.jsonl", "w") as f:
            f.writelines(json.dumps(s) + "\n" for s in self.samples)
        return placement(self.samples)


def placement(samples: list[dict]) -> dict:
    """What a Monitor's samples say: per server (by its server.json; a GPU process without one,
    such as a control's or a triage row's fresh server, by its pid) the CUDA_VISIBLE_DEVICES
    it inherited and the GPUs nvidia-smi saw it on; per GPU its peak memory and mean load while
    every named server was up; the most GPUs busy at once; the driver's last CPU time."""
    named = {srv["pid"] for s in samples for n, srv in s["servers"].items() if not n.startswith("pid")}
    servers: dict[str, dict] = {}
    for s in samples:
        for name, srv in s["servers"].items():
            if name.startswith("pid") and srv["pid"] in named:
                continue  # a server seen on its GPU before it wrote its server.json
            seen = servers.setdefault(name, {"pids": set(), "CUDA_VISIBLE_DEVICES": set(), "gpus": set(), "mem_mib": 0})
            seen["pids"].add(srv["pid"])
            if srv["CUDA_VISIBLE_DEVICES"] is not None:
                seen["CUDA_VISIBLE_DEVICES"].add(srv["CUDA_VISIBLE_DEVICES"])
            if srv.get("gpu") is not None:
                seen["gpus"].add(srv["gpu"])
            seen["mem_mib"] = max(seen["mem_mib"], srv.get("mem_mib", 0))
    names = {n for n in servers if not n.startswith("pid")}
    full = [s for s in samples if names and all(s["servers"].get(n, {}).get("alive") for n in names)]
    gpus: dict[str, dict] = {}
    for s in full:
        for i, g in s["gpus"].items():
            row = gpus.setdefault(i, {"mem_used_max_mib": 0, "util": []})
            row["mem_used_max_mib"] = max(row["mem_used_max_mib"], g["mem_used_mib"])
            row["util"].append(g["util"])
    cpu = [s["driver_cpu_s"] for s in samples if s["driver_cpu_s"] is not None]
    return {
        "servers": {n: {k: sorted(v) if isinstance(v, set) else v for k, v in seen.items()} for n, seen in servers.items()},
        "gpus_while_all_up": {i: {"mem_used_max_mib": g["mem_used_max_mib"],
                                  "util_mean": round(sum(g["util"]) / len(g["util"]), 1)} for i, g in gpus.items()},
        "samples_all_up": len(full),
        "most_gpus_busy_at_once": max((len({a["gpu"] for a in s["gpu_apps"].values()}) for s in samples), default=0),
        "driver_cpu_s": cpu[-1] if cpu else None,
    }


def run_watched(cmd: list[str], out: Path, env: dict[str, str], timeout: float) -> tuple[subprocess.CompletedProcess, float, dict]:
    """`cmd` with its stderr in out/stderr, watched by a Monitor; its result, wall time and the
    monitor's summary."""
    print("$", shlex.join(cmd), flush=True)
    start = time.monotonic()
    with open(out / "stderr", "a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=True)
        watch = Monitor(out, proc.pid)
        try:
            stdout, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)  # the CLI stops its servers and the cluster on an interrupt
            try:
                stdout, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, _ = proc.communicate()
    wall = time.monotonic() - start
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, ""), wall, watch.finish()


def ray_env() -> dict[str, str]:
    # A local Ray cluster writes an auth token under ~/.ray unless told not to (bench/scaleout.py).
    return {**os.environ, "RAY_AUTH_MODE": "disabled"}


def scaleout(seconds: str) -> None:
    """The arms of ARMS (default local, ray-1, ray-2), one after another with the same seed and
    budget, each a `servefuzz fuzz` campaign whose servers it launches itself; each arm's
    figures and GPU placement go to scaleout.json."""
    arms = os.environ.get("ARMS", "local ray-1 ray-2").split()
    until = float(os.environ.get("RAY_UNTIL", "inf"))
    budget = min(float(seconds), (until - time.time()) / len(arms) - ARM_OVERHEAD_S)
    if budget < 10:
        print(f"scaleout: no time left for {len(arms)} arms", flush=True)
        return
    root = RESULTS / f"scaleout-{int(budget)}s"
    n = 1
    while root.exists():
        n, root = n + 1, RESULTS / f"scaleout-{int(budget)}s-{n + 1}"
    root.mkdir(parents=True)
    launch, seed, rows = launch_command(), os.environ.get("SEED", "0"), []
    # What Ray sees here, before any arm waits on it: an actor asking for a GPU Ray did not
    # detect would wait for one forever.
    probe = ("import json, ray; ray.init(address='local', num_cpus=1, include_dashboard=False, log_to_driver=False); "
             "print(json.dumps({'ray': ray.__version__, **ray.cluster_resources()})); ray.shutdown()")
    seen = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ray_env(), timeout=180)
    print(f"ray sees: {seen.stdout.strip() or seen.stderr.strip()[-2000:]}", flush=True)
    try:
        resources = json.loads(seen.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        resources = {}
    (root / "ray-resources.json").write_text(json.dumps(resources, indent=1))
    workers = max((int(a.removeprefix("ray-")) for a in arms if a.startswith("ray-")), default=0)
    if float(resources.get("GPU", 0)) < workers * float(GPUS_PER_WORKER):
        (root / "crash.json").write_text(json.dumps({"exit": seen.returncode, "ray_sees": resources,
                                                     "stderr_tail": seen.stderr[-3000:]}, indent=2))
        print(f"scaleout: Ray sees fewer GPUs than {workers} workers need; no arm run", flush=True)
        return
    for arm in arms:
        out = root / arm
        out.mkdir()
        env = ray_env()
        if arm == "local" and GPUS_PER_WORKER != "0":
            env["CUDA_VISIBLE_DEVICES"] = "0"  # one GPU, as a Ray worker gets: llama.cpp would split over all
        cmd = [sys.executable, "-m", "servefuzz", "fuzz", "--launch", launch, "--engine", "llamacpp", "--keep-going",
               "--time", f"{budget:g}", "--seed", seed, "--out", str(out), "--json", *ARM_ARGS[arm],
               *os.environ.get("FUZZ_EXTRA", "").split()]
        done, wall, placed = run_watched(cmd, out, env, timeout=budget + 240)
        (out / "fuzz.json").write_text(done.stdout)
        row = {"arm": arm, "exit": done.returncode, "wall_s": round(wall, 1), **placed}
        try:
            s = json.loads(done.stdout)
        except ValueError:
            s = None
        if done.returncode in (0, 1) and s:
            minutes = max(float(s["elapsed_s"]), 1e-9) / 60
            row.update(scenarios=s["iterations"], requests=s["requests"], elapsed_s=s["elapsed_s"],
                       scenarios_per_min=round(s["iterations"] / minutes, 1),
                       requests_per_min=round(s["requests"] / minutes, 1), findings=len(s.get("findings", [])),
                       stopped_because=s.get("stopped_because"))
            if row["driver_cpu_s"] is not None:
                row["driver_cpu_share"] = round(row["driver_cpu_s"] / wall, 3)
        else:
            tail = (out / "stderr").read_text(errors="replace")[-3000:]
            (out / "crash.json").write_text(json.dumps({"exit": done.returncode, "command": cmd, "stderr_tail": tail}, indent=2))
            print(f"CRASH: arm {arm} exited {done.returncode}; stderr tail:\n{tail}", flush=True)
        rows.append(row)
        print(json.dumps(row), flush=True)
        (root / "scaleout.json").write_text(json.dumps({"budget_s": budget, "seed": seed, "launch": launch,
                                                        "gpus_per_worker": GPUS_PER_WORKER, "arms": rows}, indent=1))


def ray_triage() -> None:
    """`servefuzz triage --ray local --parallel 2` of one finding: the worst of the last
    scale-out run's, else issue 15's stored finding (.gpu/settle/finding.json, made on this CUDA
    server). Each row a Ray task with its own server, one GPU each."""
    until = float(os.environ.get("RAY_UNTIL", "inf"))
    runs = os.environ.get("TRIAGE_RUNS", "5")
    roots = sorted(RESULTS.glob("scaleout-*"), key=lambda p: p.stat().st_mtime)
    found = []
    for root in reversed(roots):
        for arm in ("ray-2", "ray-1", "local"):
            if (root / arm / "findings").is_dir():
                found += [p for p, _ in worst_findings(root / arm, 1)]
        if found:
            break
    source = found[0] if found else ROOT / ".gpu" / "settle" / "finding.json"
    timeout = until - time.time()
    if timeout < 60:
        print("ray-triage: no time left", flush=True)
        return
    where = RESULTS / "ray-triage"
    n = 1
    while where.exists():
        n, where = n + 1, RESULTS / f"ray-triage-{n + 1}"
    where.mkdir(parents=True)
    finding = where / "finding.json"
    finding.write_text(source.read_text())
    cmd = [sys.executable, "-m", "servefuzz", "triage", str(finding), "--launch", launch_command(), "--engine",
           "llamacpp", "--runs", runs, "--ray", "local", "--parallel", "2", "--gpus-per-worker", GPUS_PER_WORKER]
    done, wall, placed = run_watched(cmd, where, ray_env(), timeout=timeout)
    (where / "stdout").write_text(done.stdout)
    print(done.stdout[-3000:], flush=True)
    triaged = where / "finding_triaged.json"
    rows = []
    if triaged.exists():
        t = load_finding(triaged).triage
        if t is not None:
            rows = [{"row": r.name, "rate": r.rate, "component": r.component, "error": r.error} for r in (t.baseline, *t.variants)]
    result = {"finding": str(source.relative_to(ROOT) if source.is_relative_to(ROOT) else source),
              "exit": done.returncode, "wall_s": round(wall, 1), "rows": rows, **placed}
    (where / "ray-triage.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result), flush=True)


def scaleout_lines() -> list[str]:
    """summary.md's part for the scale-out runs and the Ray triage."""
    lines = []
    for path in sorted(RESULTS.glob("scaleout-*/scaleout.json")):
        s = json.loads(path.read_text())
        lines += [f"## {path.parent.name}: servefuzz fuzz, {s['budget_s']:g} s per arm, seed {s['seed']}, "
                  f"--gpus-per-worker {s['gpus_per_worker']}", "",
                  "| arm | exit | scenarios | requests | elapsed s | wall s | scenarios/min | requests/min | findings "
                  "| driver CPU s | servers: CUDA_VISIBLE_DEVICES -> GPU (peak MiB) | GPUs while all up: peak MiB, mean load % |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in s["arms"]:
            samples = path.parent / r["arm"] / "gpu-samples.jsonl"
            if samples.exists():
                r = {**r, **placement([json.loads(line) for line in samples.read_text().splitlines() if line])}
            srv = "; ".join(f"{n}: {','.join(v['CUDA_VISIBLE_DEVICES']) or '-'} -> {v['gpus'] or '-'} ({v['mem_mib']})"
                            for n, v in r.get("servers", {}).items())
            gpu = "; ".join(f"{i}: {g['mem_used_max_mib']}, {g['util_mean']}" for i, g in r.get("gpus_while_all_up", {}).items())
            lines.append(f"| {r['arm']} | {r['exit']} | {r.get('scenarios', '-')} | {r.get('requests', '-')} | "
                         f"{r.get('elapsed_s', '-')} | {r['wall_s']} | {r.get('scenarios_per_min', '-')} | "
                         f"{r.get('requests_per_min', '-')} | {r.get('findings', '-')} | {r.get('driver_cpu_s', '-')} | "
                         f"{srv or '-'} | {gpu or '-'} |")
        lines.append("")
        by = {r["arm"]: r for r in s["arms"] if "scenarios_per_min" in r}
        for a, b in (("ray-2", "ray-1"), ("ray-1", "local")):
            if a in by and b in by:
                lines.append(f"- {a} / {b}: {by[a]['scenarios_per_min'] / by[b]['scenarios_per_min']:.2f}x scenarios/min, "
                             f"{by[a]['requests_per_min'] / by[b]['requests_per_min']:.2f}x requests/min")
        lines.append("")
    for path in sorted(RESULTS.glob("ray-triage*/ray-triage.json")):
        t = json.loads(path.read_text())
        samples = path.parent / "gpu-samples.jsonl"
        if samples.exists():
            t = {**t, **placement([json.loads(line) for line in samples.read_text().splitlines() if line])}
        lines += [f"## {path.parent.name}: servefuzz triage --ray local --parallel 2 of {t['finding']}", "",
                  f"exit {t['exit']} in {t['wall_s']} s; servers: "
                  + ("; ".join(f"{n}: CUDA_VISIBLE_DEVICES {v['CUDA_VISIBLE_DEVICES']} -> GPU {v['gpus']}"
                               for n, v in t["servers"].items()) or "-")
                  + f"; at most {t['most_gpus_busy_at_once']} GPUs busy at once", ""]
        lines += [f"- {r['row']}: {r['rate']} {r['component'] or ''} {r['error'] or ''}".rstrip() for r in t["rows"]]
        lines.append("")
    return lines


def first_token_shifts(campaign: Path) -> tuple[dict[str, int], list[str]]:
    """How far each loaded request's first-token logprobs sit from the same request alone.

    Position 0 is scored from the prompt alone, before any token could flip, so this is the
    cleanest look at the numerics: the largest |logprob change| over the top-k tokens both runs
    list. Returns counts per bucket and one line per shift of 0.05 or more.
    """
    path = campaign / "histories.jsonl"
    if not path.exists():
        return {}, []
    bounds = (("<1e-4", 1e-4), ("<0.02", 0.02), ("<0.05", 0.05))
    buckets = {"0": 0, **{k: 0 for k, _ in bounds}, ">=0.05": 0}
    large, iteration, records = [], -1, {}

    def score() -> None:
        for (rid, label, run), rec in records.items():
            alone = records.get((rid, "alone", 0))
            if label != "load" or alone is None:
                continue
            a, b = dict(rec.choices[0].top_logprobs[0]), dict(alone.choices[0].top_logprobs[0])
            shift = max((abs(a[t] - b[t]) for t in a.keys() & b.keys()), default=None)
            if shift is None:
                continue
            buckets[next((k for k, hi in bounds if shift < hi), ">=0.05") if shift else "0"] += 1
            if shift >= 0.05:
                new = (rec.prompt_tokens or 0) - (rec.cached_tokens or 0)
                large.append(f"iteration {iteration} {rid} load#{run}: {shift:.3f} (prompt {rec.prompt_tokens}, "
                             f"cached {rec.cached_tokens}, {new} evaluated)")

    for h in read_history_jsonl(path):
        if h.run == 0 and h.label == "load":  # every iteration starts with its first loaded run
            score()
            iteration, records = iteration + 1, {}
        for r in h.records:
            if r.ok and r.choices and r.choices[0].top_logprobs:
                records[(r.request_id, h.label, h.run)] = r
    score()
    return buckets, large


def noise_lines(campaign: Path) -> list[str]:
    """The campaign's noise model (noise.json) as a table: per position bucket and cache state,
    how far logprobs of agreeing tokens moved between runs (linf: the largest over the top-k;
    gap: the top-1/top-2 gap's shift, the one a flip's margin is held to)."""
    try:
        shifts = json.loads((campaign / "noise.json").read_text())["shifts"]
    except (OSError, ValueError, KeyError):
        return []
    order = lambda k: (int(k.split("/")[0].split("-")[0].rstrip("+")), k)
    keys = sorted({k for v in shifts.values() for k in v}, key=order)
    out = ["Noise the campaign measured on agreeing tokens (noise.json): count, p99 and max per position bucket", "",
           "| position/cache | tokens | linf p99 | linf max | gap p99 | gap max |", "|---|---|---|---|---|---|"]
    for k in keys:
        linf, gap = shifts.get("linf", {}).get(k, {}), shifts.get("gap", {}).get(k, {})
        f = lambda h, q: "-" if h.get(q) is None else f"{h[q]:.2g}"
        out.append(f"| {k} | {linf.get('count', gap.get('count', '-'))} | {f(linf, 'p99')} | {f(linf, 'max')} | "
                   f"{f(gap, 'p99')} | {f(gap, 'max')} |")
    return [*out, ""]


def campaign_figures(campaign: Path) -> str:
    """The campaign's own totals (progress.json and its findings folder, written as it goes, so a
    campaign cut short or crashed still counts), then how its last session ended (fuzz.json,
    crash.json)."""
    def read(name: str) -> dict:
        try:
            return json.loads((campaign / name).read_text() or "{}")
        except (OSError, ValueError):
            return {}
    progress, last, crash = read("progress.json"), read("fuzz.json"), read("crash.json")
    findings = len(list((campaign / "findings").glob("finding_*.json")))
    if progress:
        text = (f"{progress.get('next_iteration')} scenarios, {progress.get('requests')} requests in "
                f"{progress.get('elapsed_s')} s of fuzzing; {findings} findings")
    else:
        text = f"no progress.json: the campaign ran no scenario; {findings} findings"
    if crash:
        return text + f". **servefuzz crashed** (exit {crash.get('exit')}): see crash.json"
    if last:
        return text + f" (last session: {last.get('iterations')} scenarios, stopped because {last.get('stopped_because')})"
    return text + " (last session: no result from servefuzz: cut short)"


def crashed() -> None:
    """Exit 3 when a campaign's last session crashed (the shell then exits 3 after packing)."""
    bad = [str(c.relative_to(RESULTS)) for c in sorted([*RESULTS.glob("campaign-*"), *RESULTS.glob("scaleout-*"),
                                                          *RESULTS.glob("scaleout-*/*")])
           if (c / "crash.json").exists()]
    if bad:
        print(f"servefuzz crashed in: {', '.join(bad)}", flush=True)
        sys.exit(3)


def summary() -> None:
    """summary.md: each campaign's numbers, and each finding's verdict with its evidence."""
    lines = ["# servefuzz on the GPU: summary", ""]
    machine = RESULTS / "machine.txt"
    if machine.exists():
        lines += ["```", machine.read_text().strip(), "```", ""]
    for campaign in sorted(RESULTS.glob("campaign-*")):
        lines += [f"## {campaign.name}", "", campaign_figures(campaign), ""]
        buckets, large = first_token_shifts(campaign)
        if buckets:
            lines += ["First-token logprob shift, loaded vs alone (largest over the shared top-k): "
                      + ", ".join(f"{k}: {v}" for k, v in buckets.items()), ""]
            lines += [f"- {line}" for line in large] + ([""] if large else [])
        lines += noise_lines(campaign)
        warm_file = campaign / "warm-replays.json"
        warm_rates = json.loads(warm_file.read_text()) if warm_file.exists() else {}
        for path in sorted((campaign / "findings").glob("finding_*.json")):
            triaged = campaign / "triaged" / path.name
            f = load_finding(triaged if triaged.exists() else path)
            rate = f.confirmation.rate if f.confirmation else "-"
            warm = warm_rates.get(path.name, {}).get("rate", "-")
            lines += [f"### {path.name}: {f.verdict.value}, confirmed {rate}, warm replays {warm}", "",
                      f"- signature `{f.signature}`; expected to diverge: {', '.join(f.expected_diverging)}",
                      f"- {len(f.scenario.requests)} requests; why: {f.why}"]
            for a in f.anomalies:
                for d in a.divergences[:1]:
                    lines.append(
                        f"- {a.oracle.value} {a.request_id}: first divergence at token {d.position}, margin "
                        f"{d.margin if d.margin is None else f'{d.margin:.4g}'}{' (bound)' if d.margin_is_bound else ''}, "
                        f"threshold {d.threshold if d.threshold is None else f'{d.threshold:.4g}'}, "
                        f"noise p99 {d.noise_p99 if d.noise_p99 is None else f'{d.noise_p99:.3g}'} over {d.noise_tokens} tokens, "
                        f"prefix delta {d.prefix_delta if d.prefix_delta is None else f'{d.prefix_delta:.3g}'} -> {d.verdict.value}")
            rows = campaign / "triage" / path.stem / "rows.json"
            if f.triage and rows.exists():
                jitters = {e["row"]: e["jitter_max"] for e in json.loads(rows.read_text())}
                lines += ["", "| triage row | reproduced | largest agreeing-token jitter | component | error |",
                          "|---|---|---|---|---|"]
                for row in (f.triage.baseline, *f.triage.variants):
                    j = jitters.get(row.name)
                    lines.append(f"| {row.name} | {row.rate} | {'-' if j is None else f'{j:.2g}'} | "
                                 f"{row.component or '-'} | {row.error or ''} |")
            lines.append("")
    lines += scaleout_lines()
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")


{"fuzz": fuzz, "launched": launched, "triage": triage, "summary": summary, "crashed": crashed, "scaleout": scaleout,
 "ray_triage": ray_triage, "digest": lambda path: print(digest(Path(path).read_text(errors="replace")), flush=True),
 }[sys.argv[1]](*sys.argv[2:])
PY
}

check_manifest
setup_python
[[ -f $RESULTS/machine.txt ]] || record_machine >/dev/null
trap pack EXIT   # whatever happens, bring back what there is
# A server's start (1.5-2 min for an engine) comes before the campaign's --time.
ENGINE_START_S=${ENGINE_START_S:-150}
one_step() {
    local step=$1
    case $step in
        build) build; record_machine ;;
        fuzz:*:*) IFS=: read -r _ profile seconds <<<"$step"
                  # Leave time for the last scenario's confirmation, the warm replays and the pack.
                  seconds=$(( seconds < END - SECONDS - 80 ? seconds : END - SECONDS - 80 ))
                  if (( seconds < 10 )); then say "no time left to fuzz $profile"; return; fi
                  say "fuzzing profile $profile for $seconds s"; drive fuzz "$profile" "$seconds" ;;
        launch:*:*:*) local arch build
                  IFS=: read -r _ preset profile seconds arch build <<<"$step"
                  local left=$(( END - SECONDS - 80 - ENGINE_START_S ))
                  seconds=$(( seconds < left ? seconds : left ))
                  if (( seconds < 10 )); then say "no time left to fuzz $preset/$profile${arch:+/$arch}"; return; fi
                  say "fuzzing $preset, profile $profile${arch:+, model $arch}${build:+ ($build build)}, for $seconds s"
                  drive launched "$preset" "$profile" "$seconds" "${arch:-}" "${build:-}" ;;
        user:*:*:*) IFS=: read -r _ preset profile seconds <<<"$step"
                  local left=$(( END - SECONDS - 80 - ENGINE_START_S ))
                  seconds=$(( seconds < left ? seconds : left ))
                  if (( seconds < 10 )); then say "no time left for the user's-install campaign"; return; fi
                  say "$preset as a user has it installed (its site on PYTHONPATH, no engine cache), profile $profile, for $seconds s"
                  user_install "$preset" "$profile" "$seconds" ;;
        noise:*) local preset=${step#noise:}
                 say "agreeing-token noise of the tiny models on $preset: bench/judgeable_noise.py ${NOISE_ARGS:-}"
                 # The working tree's servefuzz (the bench needs the builds of this commit), the
                 # bundle's wheels and engine as the other steps have them; the rows reach
                 # $RESULTS as each model ends, so a deadline keeps what was measured.
                 # shellcheck disable=SC2086
                 PYTHONPATH=$ROOT/src:$W/site timeout $(( END - SECONDS - 30 )) \
                     python3 bench/judgeable_noise.py --preset "$preset" ${NOISE_ARGS:-} \
                     --out "$RESULTS/judgeable-noise-$preset.jsonl" >"$RESULTS/judgeable-noise-$preset.log" 2>&1 \
                     || say "the noise bench ended early ($?): see judgeable-noise-$preset.log"
                 cp "$RESULTS/judgeable-noise-$preset".* "$OUT/" 2>/dev/null || true ;;
        flashinfer-jit) say "compiling FlashInfer's modules for the flashinfer profiles"; flashinfer_jit ;;
        summary) ;;  # only the summary and the pack, which every run ends with (here: on results brought back)
        triage) say "triage"; TRIAGE_UNTIL=$(( $(date +%s) + END - SECONDS - 25 )) drive triage "${MAX_FINDINGS:-2}" ;;
        ray:*) say "scale-out on Ray: arms ${ARMS:-local ray-1 ray-2}, at most ${step#ray:} s each"
               RAY_UNTIL=$(( $(date +%s) + END - SECONDS - 30 )) drive scaleout "${step#ray:}" ;;
        ray-triage) say "triage on Ray, two rows at once"
                    RAY_UNTIL=$(( $(date +%s) + END - SECONDS - 30 )) drive ray_triage ;;
        *) die "unknown step $step (build, fuzz:PROFILE:SECONDS, launch:PRESET:PROFILE:SECONDS[:ARCH[:BUILD]], user:PRESET:PROFILE:SECONDS, triage, ray:SECONDS, ray-triage, flashinfer-jit, summary; STEP+STEP at once)" ;;
    esac
}
for step in "${@:-build}"; do
    if [[ $step == *+* ]]; then
        IFS=+ read -ra parts <<<"$step"
        pids=()
        # STAGGER_S apart: engines that size their memory from what is free when they start
        # (SGLang's --mem-fraction-static) must not profile while another is loading.
        delay=0
        for part in "${parts[@]}"; do (sleep "$delay"; one_step "$part") & pids+=($!); delay=$(( delay + ${STAGGER_S:-0} )); done
        for pid in "${pids[@]}"; do wait "$pid" || say "a step of $step failed"; done
    else
        one_step "$step"
    fi
done
drive crashed || { say "a servefuzz campaign crashed (see summary.md)"; exit 3; }
say "done"
