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
#   summary                nothing but the summary and the pack (on results already there)
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
# then), LLAMA_SERVER (use this binary instead of building one: a dry run on a CPU machine).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
W=${SERVEFUZZ_GPU_WORK:-/tmp/servefuzz-gpu}
OUT=${OUT:?set OUT to the folder results go to}
COMMIT=$(sed -n 's/^LLAMA_CPP_COMMIT=\([0-9a-f]*\).*/\1/p' scripts/setup_engines.sh)
export SERVEFUZZ_CACHE=$W/cache   # servefuzz.engines finds llama-server here
BIN=$SERVEFUZZ_CACHE/llama.cpp-$COMMIT/llama-server
RESULTS=$W/results
# No NVLink multicast, ever: it can take the host's shared GPUs down (the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
END=$((SECONDS + ${DEADLINE:-86400}))

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
    export PYTHONPATH=$W/py:$W/site
    python3 -m servefuzz --version
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
        "$BIN" --version 2>&1 | grep -iE 'version|built|CUDA|device' || true
        python3 --version
    } >"$RESULTS/machine.txt"
    cat "$RESULTS/machine.txt"
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
    GGUF=$ROOT/.gpu/tiny.gguf RESULTS=$RESULTS python3 - "$@" <<'PY'
import asyncio, dataclasses, json, os, subprocess, sys, time
from pathlib import Path

from servefuzz.engines import llama_server_argv
from servefuzz.finding import Finding, Triage, TriageOutcome, load_finding
from servefuzz.history import RunHistory, read_history_jsonl, write_history_jsonl
from servefuzz.launcher import ServerProcess
from servefuzz.oracles import liveness
from servefuzz.replay_report import render_replay_report, replay_result
from servefuzz.runner import RunConfig, Runner
from servefuzz.targets import make_target

GGUF, RESULTS = Path(os.environ["GGUF"]), Path(os.environ["RESULTS"])
SLOTS, RUNS = int(os.environ.get("SLOTS", "8")), int(os.environ.get("REPLAY_RUNS", "10"))
# Flags on top of servefuzz.engines.llama_server_argv, which sets `-fa off -ctk f32 -ctv f32`;
# llama.cpp reads its flags in order, so a later one wins.
PROFILES = {
    "exact": (),  # servefuzz's most reproducible setting: no flash attention, f32 KV cache
    "stock": ("-fa", "auto", "-ctk", "f16", "-ctv", "f16"),  # llama.cpp's own GPU defaults
}


def server(profile: str, log: Path, *, slots: int = SLOTS, flags=(), env=None) -> ServerProcess:
    (RESULTS / "slots").mkdir(exist_ok=True)  # the slot erase that flushes the cache needs it
    extra = ("-ngl", "99", "--slot-save-path", str(RESULTS / "slots"), "--cache-ram", "0", *PROFILES[profile], *flags)
    argv = llama_server_argv(GGUF, slots=slots, ctx=8192, threads=4, extra=extra)
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
    bad = [c.name for c in sorted(RESULTS.glob("campaign-*")) if (c / "crash.json").exists()]
    if bad:
        print(f"servefuzz crashed in: {', '.join(bad)}", flush=True)
        sys.exit(3)


def summary() -> None:
    """summary.md: each campaign's numbers, and each finding's verdict with its evidence."""
    lines = ["# servefuzz on llama.cpp CUDA: summary", ""]
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
    (RESULTS / "summary.md").write_text("\n".join(lines) + "\n")


{"fuzz": fuzz, "triage": triage, "summary": summary, "crashed": crashed}[sys.argv[1]](*sys.argv[2:])
PY
}

setup_python
trap pack EXIT   # whatever happens, bring back what there is
for step in "${@:-build}"; do
    case $step in
        build) build; record_machine ;;
        fuzz:*:*) IFS=: read -r _ profile seconds <<<"$step"
                  # Leave time for the last scenario's confirmation, the warm replays and the pack.
                  seconds=$(( seconds < END - SECONDS - 80 ? seconds : END - SECONDS - 80 ))
                  if (( seconds < 10 )); then say "no time left to fuzz $profile"; continue; fi
                  say "fuzzing profile $profile for $seconds s"; drive fuzz "$profile" "$seconds" ;;
        summary) ;;  # only the summary and the pack, which every run ends with (here: on results brought back)
        triage) say "triage"; TRIAGE_UNTIL=$(( $(date +%s) + END - SECONDS - 25 )) drive triage "${MAX_FINDINGS:-2}" ;;
        *) die "unknown step $step (build, fuzz:PROFILE:SECONDS, triage, summary)" ;;
    esac
done
drive crashed || { say "a servefuzz campaign crashed (see summary.md)"; exit 3; }
say "done"
