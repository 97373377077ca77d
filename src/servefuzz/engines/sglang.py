"""SGLang: its native dialect (`/generate`, `/flush_cache`, `/server_info`); its presets
`sglang-cpu` (PyPI's sglang on CPU torch, a venv per version, with servefuzz's stand-in kernel
package) and `sglang-gpu` (the H200).

Everything servefuzz knows of SGLang is here: the spec, the flag allow-list and triage rows,
the pure argv builders and environments, the profiles and the command a report prints.

    >>> argv = cpu_argv("venv/bin/python", Path("models/hf-float32"), dtype="auto", page_size=64)
    >>> argv[argv.index("--dtype") + 1], argv[argv.index("--page-size") + 1]
    ('float32', '64')
    >>> cpu_env("standins", "0.5.10.post1")["TRITON_INTERPRET"], "TRITON_INTERPRET" in cpu_env("standins", "0.5.23")
    ('1', False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from servefuzz.engine_flags import (
    Flag,
    FlagVariant,
    Kind,
    flag_pairs,
    flag_words,
    path_word,
    variant,
    with_flags,
    without_flags,
)
from servefuzz.engines.spec import (
    GPU_INSTALL,
    GPU_START_TIMEOUT_S,
    WRITE_BYTECODE,
    ArgFeature,
    BugForm,
    Built,
    CommandInputs,
    Deterministic,
    EngineSpec,
    Feature,
    LaunchInputs,
    Meter,
    Plan,
    Preset,
    Profile,
    ServerFacts,
    Switch,
    Versions,
    first_on_path,
    flag_arg,
    positive_arg,
    sizes_arg,
)
from servefuzz.errors import UsageError

__all__ = ["BUG_FORM", "CPU_PRESET", "CPU_VERSIONS", "DETERMINISTIC", "FLAGS", "GPU_PRESET", "GPU_VERSIONS",
           "INTERPRETED", "METERS", "SERVER_ARG_FEATURES", "SWITCHES", "SPEC", "START_TIMEOUT_S", "TRIAGE", "cpu_argv", "cpu_env",
           "cpu_refusal", "gpu_argv", "gpu_env", "gpu_refusal"]

# SGLang's deterministic inference (batch-invariant kernels) refuses to start with its CPU
# attention backend (measured): on the CPU there is none.
# Its promise, read upstream (2026-12-04): the deterministic inference docs' claim, and the cache
# tests' rule that holds every cache-reuse path to it.
DETERMINISTIC = Deterministic(
    "--enable-deterministic-inference", flag="--enable-deterministic-inference", on_cpu=False,
    server_arg="enable_deterministic_inference",
    words='"SGLang achieves fully deterministic inference while maintaining compatibility with chunked prefill, '
          'CUDA graphs, radix cache, and non-greedy sampling"; for every cache-reuse path, "Any nonzero KL is a '
          'KV/state reuse bug."',
    source="https://docs.sglang.io/advanced_features/deterministic_inference.html; "
           "https://github.com/sgl-project/sglang/issues/34899")

# The trigger features SGLang's `/server_info` args show (the reference engine reports the same).
SERVER_ARG_FEATURES = (
    ArgFeature("radix-cache", "disable_radix_cache", False, "the server ran with the radix cache on"),
    ArgFeature("overlap", "disable_overlap_schedule", False, "the server ran with the overlap scheduler on",
               unless_deterministic=True),
    ArgFeature("cuda-graph", "disable_cuda_graph", False, "the server ran with (padded) CUDA-graph decode on"),
)

# SGLang's /metrics counters (with --enable-metrics) that say what the engine did, as its
# observability/metrics_collector.py (0.5.23) defines and documents them. Read by the prometheus
# client, a Counter's name ends in `_total`; labels (`cache_source` of cached_tokens_total:
# device, host or storage; `pool` of load_back_tokens_total) are summed by the parser.
METERS: tuple[Meter, ...] = (
    Meter("sglang:cached_tokens_total", Feature.PREFIX_CACHE, "hit tokens"),
    Meter("sglang:load_back_tokens_total", Feature.HOST_CACHE, "tokens loaded back from the host tier"),
    Meter("sglang:cached_tokens_total{cache_source=host}", Feature.HOST_CACHE, "hit tokens from the host tier"),
    Meter("sglang:hicache_backup_tokens_total", Feature.HOST_CACHE, "tokens written to the host tier", shows=False),
    Meter("sglang:num_retracted_requests_total", Feature.PREEMPTION, "retracted requests"),
    Meter("sglang:evicted_tokens_total", Feature.EVICTION, "evicted tokens"),
    Meter("sglang:num_aborted_requests_total", Feature.ABORTS, "aborted requests"),
    # Its acceptance is a gauge (spec_accept_length, spec_accept_rate): no counter of accepted
    # tokens, so a verify step is the nearest thing to proof that drafts were checked.
    Meter("sglang:spec_verify_calls_total", Feature.SPECULATIVE, "verify steps"),
    # Counted per finished request beside the verify steps, so the two give the mean acceptance
    # length (tokens per verify step; 1 when every draft is rejected): not a sign of drafting.
    Meter("sglang:generation_tokens_total", Feature.SPECULATIVE, "generated tokens", shows=False,
          per="sglang:spec_verify_calls_total", rate="tokens a verify step (mean acceptance length)"),
)


def _set(value: object) -> bool | None:
    """A server arg that is on when given at all (a name, a path, a list): None/""/[] is off."""
    return value not in (None, "", [], False)


# The server args of /server_info that turn SGLang's mechanisms on or off (its ServerArgs names,
# which the reference engine shares for the ones it has).
SWITCHES: tuple[Switch, ...] = (
    Switch(Feature.PREFIX_CACHE, "disable_radix_cache", lambda v: None if not isinstance(v, bool) else not v),
    Switch(Feature.HOST_CACHE, "enable_hierarchical_cache", lambda v: v if isinstance(v, bool) else None),
    Switch(Feature.CHUNKED_PREFILL, "chunked_prefill_size",
           lambda v: v > 0 if isinstance(v, int) and not isinstance(v, bool) else None),
    Switch(Feature.SPECULATIVE, "speculative_algorithm", _set),
    Switch(Feature.ADAPTERS, "lora_paths", _set),
)

# The four switches the seeds' bisection turns, spelled as SGLang spells them; the reference
# engine, which speaks SGLang's dialect, takes the same four (engines/reference.py).
SWITCH_FLAGS: tuple[Flag, ...] = (
    Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL),
    Flag("disable_overlap_schedule", "--disable-overlap-schedule", Kind.BOOL),
    Flag("disable_cuda_graph", "--disable-cuda-graph", Kind.BOOL),
    Flag("enable_deterministic_inference", "--enable-deterministic-inference", Kind.BOOL),
)

# SGLang (`python -m sglang.launch_server`): the args that decide whether these bugs show (the
# ones the seeds' bisection varies); the others are in a report's environment section.
FLAGS: tuple[Flag, ...] = (
    Flag("context_length", "--context-length", Kind.INT, minimum=1),
    Flag("mem_fraction_static", "--mem-fraction-static", Kind.FLOAT, minimum=0.0, maximum=1.0),
    Flag("page_size", "--page-size", Kind.INT, minimum=1),
    Flag("max_total_tokens", "--max-total-tokens", Kind.INT, minimum=1),
    Flag("chunked_prefill_size", "--chunked-prefill-size", Kind.INT, minimum=-1),
    Flag("max_running_requests", "--max-running-requests", Kind.INT, minimum=1),
    Flag("attention_backend", "--attention-backend", Kind.NAME),
    Flag("kv_cache_dtype", "--kv-cache-dtype", Kind.NAME),
    Flag("tp_size", "--tp-size", Kind.INT, minimum=1),
    *SWITCH_FLAGS,
)

# Triage's rows and what a cure by each implicates: the bisection plan of the SGLang survey and
# the flags that cured the upstream reports.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("--disable-radix-cache", "radix cache (prefix reuse)"),
    # No SGLANG_RADIX_DISABLE_REUSE row: no release reads the variable (PR #24877 closed
    # unmerged; neither 0.5.10.post1 nor 0.5.23 names it, read 2026-12-02), so the row changed
    # nothing and its "still there" read as "not a reuse bug" on a salt-isolation finding.
    variant("--disable-overlap-schedule", "overlap scheduler"),
    variant("--disable-cuda-graph", "CUDA-graph decode (padding)"),
    variant("--attention-backend triton", "attention backend kernels", gpu_only=True),
    variant("--chunked-prefill-size -1", "chunked prefill"),
    variant("--page-size 1", "paged KV (page size)"),
    variant("--max-running-requests 1", "continuous batching (concurrency)"),
    # On CPU SGLang refuses it: "only ['ascend', 'fa3', 'fa4', 'flashinfer', 'intel_xpu',
    # 'triton'] attention backends are supported for deterministic inference" (0.5.23).
    variant("--enable-deterministic-inference", "batch-variant numerics", gpu_only=True),
)

# sgl-project/sglang's bug form (.github/ISSUE_TEMPLATE/1-bug-report.yml, read upstream).
BUG_FORM = BugForm(
    source="sgl-project/sglang .github/ISSUE_TEMPLATE/1-bug-report.yml (🐞 Bug report)",
    title_prefix="[Bug] ",
    component="",
    fields=(("Checklist", "checklist"), ("Describe the bug", "description"), ("Reproduction", "reproduction"),
            ("Environment", "environment"), ("servefuzz's evidence", "evidence")),
    checklist=("I searched related issues but found no solution.", "The bug persists in the latest version.",
               "Issues without environment info and a minimal reproducible demo are hard to resolve and may "
               "receive no feedback.",
               "If this is not a bug report but a general question, please start a discussion at "
               "https://github.com/sgl-project/sglang/discussions. Otherwise, it will be closed.",
               "Please use English. Otherwise, it will be closed."),
    environment_command="python3 -m sglang.check_env",
)

# On CPU: the newest on PyPI (what `--launch sglang-cpu` runs) and the version of the seed report
# (sgl-project/sglang#22819), both installed by scripts/setup_engines.sh, oldest first.
CPU_VERSIONS = Versions("0.5.23", "sglang-cpu", ladder=("0.5.10.post1", "0.5.23"))
# On a GPU: the default is sglang 0.5.17 with sglang-kernel 0.4.5, built against the lent H200
# image's torch 2.11.0 (what scripts/gpu_bundle.sh packs); the ladder, the releases `servefuzz
# engines install sglang-gpu@V` puts into the cache with pip (PyPI's wheels and their CUDA kernel
# package), from the seed report's version on.
GPU_VERSIONS = Versions("0.5.17", "sglang-gpu", ladder=(
    "0.5.10.post1", "0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1", "0.5.14", "0.5.15",
    "0.5.15.post1", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"))

# Its four processes import torch, transformers and SGLang's model zoo before /health answers:
# 48-79 s measured here under load (../shared/notes/sglang-cpu.md).
START_TIMEOUT_S = 300.0

# SGLang versions whose own Triton kernels run on the CPU only under Triton's interpreter, and
# those kernels: 0.5.10.post1's paged allocator is Triton alone (page sizes above 1 died at
# start: "0 active drivers"); interpreted, it is SGLang's code run element by element, checked
# against SGLang's torch version of it (standins/check_standins.py). At page size 1 no Triton
# kernel runs, so the variable changes nothing there.
INTERPRETED: dict[str, tuple[str, ...]] = {"0.5.10.post1": ("alloc_extend_kernel", "alloc_decode_kernel")}


def cpu_argv(
    python: str,
    model_dir: Path,
    *,
    dtype: str = "float32",
    page_size: int = 1,
    max_total_tokens: int = 8192,
    seed: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """SGLang's server (run by `python`, the interpreter of its venv) on 127.0.0.1:{port}, on
    the CPU, serving `model_dir`.

    Its generic torch paths (`torch_native` attention, `pytorch` sampling): the scheduler, radix
    cache, paged KV pool, chunked prefill and overlap scheduler are SGLang's own. `--dtype` is
    always given: SGLang's `auto` casts a float32 model to float16, so `auto` (a model that
    declares no type) is served as float32. `--max-total-tokens` sizes the KV pool exactly;
    `--skip-server-warmup` saves a minute and leaves the cache empty.
    """
    return [
        python, "-m", "sglang.launch_server",
        "--model-path", str(model_dir),
        "--host", "127.0.0.1", "--port", "{port}",
        "--device", "cpu",
        "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
        "--grammar-backend", "none",
        "--disable-cuda-graph", "--skip-server-warmup",
        "--dtype", "float32" if dtype == "auto" else dtype,
        "--max-total-tokens", str(max_total_tokens),
        "--mem-fraction-static", "0.1",
        "--page-size", str(page_size),
        "--random-seed", str(seed),
        # Its scheduler otherwise polls its sockets without pause: one core at 80% while idle,
        # taken from the requests of everything else on a 2-core machine. Idle, it now blocks
        # on the sockets (1 s at most, woken by the first message): nothing changes once work comes.
        "--sleep-on-idle",
        # /metrics: the counters that say what the engine did (servefuzz.exercise); off by default.
        "--enable-metrics",
        *extra,
    ]


def cpu_env(standins: str, version: str | None = None, threads: int = 1, pythonpath: str = "") -> dict[str, str]:
    """Environment SGLang `version` needs here: its CPU engine, servefuzz's stand-in kernel
    package (`standins`, its folder) first on the path of every process it spawns, and Triton's
    interpreter where the version's kernels need it (`INTERPRETED`)."""
    return {
        "SGLANG_USE_CPU_ENGINE": "1",
        "PYTHONPATH": first_on_path(standins, pythonpath),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": str(threads),
        **({"TRITON_INTERPRET": "1"} if version in INTERPRETED else {}),
        **WRITE_BYTECODE,
    }


# The GPU preset's prefill chunk (gpu_argv says why it is not SGLang's own).
GPU_CHUNK = 512


def gpu_argv(python: str, model_dir: Path, *, page_size: int = 1, seed: int = 0) -> list[str]:
    """SGLang's server on a GPU: radix cache, overlap scheduler, CUDA graphs and chunked prefill
    at its defaults, page size 1 (its default), Triton attention (FA3 only in a `+fa3` bundle, its
    `fa3` profiles) and torch sampling. Always bfloat16: at float32 sgl-kernel's CUDA rmsnorm fails the first
    forward ("failed to dispatch data type Float", measured).

    The KV pool is capped at 256Ki tokens (512 MiB of the tiny model in bfloat16). SGLang sizes it
    as the memory free after loading less `(1 - mem_fraction_static)` of what was free before
    (its `kv_cache_configurator`): at 0.2, a second server loading in between leaves that
    negative and the scheduler raises (read in 0.5.17's code; what was seen on the H200: of two
    SGLang servers started side by side, one died before `/health`, "Received sigquit from a
    child process"). At 0.8 the slack is a fifth of the GPU, and the cap, not the fraction,
    decides the pool.

    Prefill chunks of 512 tokens. SGLang sizes its chunk from the card's memory (0.5.17's
    server_args: 8,192 on an H100 or H200), over the whole context of servefuzz's tiny models
    (2,048-4,096 tokens), so at that size no prompt could ever be split and chunked prefill, on
    by default, would go untested (no prompt was split in the H200 campaigns of 2026-12-04).
    Served models have 8-32 times their chunk in context; 512 keeps the tiny models there."""
    return [
        python, "-m", "sglang.launch_server",
        "--model-path", str(model_dir),
        "--host", "127.0.0.1", "--port", "{port}",
        "--attention-backend", "triton", "--sampling-backend", "pytorch",
        "--dtype", "bfloat16",
        "--mem-fraction-static", "0.8", "--max-total-tokens", str(1 << 18),
        "--chunked-prefill-size", str(GPU_CHUNK),
        "--page-size", str(page_size),
        "--random-seed", str(seed),
        "--enable-metrics",  # /metrics, as on the CPU
    ]


def gpu_env(site: str, pythonpath: str = "") -> dict[str, str]:
    """Environment of SGLang's processes on the GPU machine: its bundle (`site`) first on their
    path (never on servefuzz's own), no hub."""
    return {"PYTHONPATH": first_on_path(site, pythonpath), "HF_HUB_OFFLINE": "1"}


def cpu_refusal(architecture: str, config: Mapping[str, object]) -> str | None:
    """Why SGLang's CPU preset will not serve this model (its config's class and keys) as the
    folder says, or None: what servefuzz's tiny models showed on 0.5.23 (docs/engines.md), read
    before a start that takes a minute. Applied to every version of the preset: 0.5.10.post1's
    Gemma 3 reads the same, its other rows are not checked there.

    A Gemma 3 with its own output layer is refused rather than served wrong: SGLang's
    `Gemma3ForCausalLM` (0.5.10.post1 and 0.5.23) computes the logits with the input embeddings
    whatever `tie_word_embeddings` says and skips `lm_head.weight` at load, so it would serve
    another model than the one the truth control computes (measured: transformers in float64
    with `lm_head` replaced by the embeddings gives SGLang's greedy tokens, 48 of 48).

    >>> cpu_refusal("Gemma3ForCausalLM", {"tie_word_embeddings": False})[:39]
    "SGLang's Gemma 3 ignores lm_head.weight"
    >>> cpu_refusal("Gemma3ForCausalLM", {"tie_word_embeddings": True}) is None
    True
    """
    if architecture == "GptOssForCausalLM":
        return ("GPT-OSS needs one of SGLang's accelerated attention backends (triton, intel_amx, ...) and the "
                "preset runs torch_native: \"GptOssForCausalLM requires one of [...] attention backend\"")
    if architecture in ("Qwen3NextForCausalLM", "NemotronHForCausalLM"):
        # With `--mamba-radix-cache-strategy no_buffer --disable-overlap-schedule` (measured on
        # Qwen3-Next) it gets further and dies importing `sgl_kernel.mamba`, a CPU kernel the
        # stand-in package does not have.
        return ("its hybrid (Mamba / gated delta net) models keep their state in a cache that needs GPU "
                "snapshots: \"extra_buffer requires platform support for Mamba cache state snapshots\"")
    if architecture == "DeepseekV3ForCausalLM" and not config.get("rope_scaling"):
        return ("its CPU rotary embedding for DeepSeek needs a rope_scaling (get_rope_cpu: \"assert rope_scaling is "
                "not None\") and this model has none")
    if architecture == "Gemma3ForCausalLM" and config.get("tie_word_embeddings") is False:
        return ("SGLang's Gemma 3 ignores lm_head.weight and computes logits with the input embeddings, and "
                "this model's are untied (tie_word_embeddings false): it would serve another model than this one")
    return None


# Read in SGLang 0.5.17's code (the GPU bundle's, sglang/...): the hidden sizes its MTP's fused
# norm kernel takes (kernels/ops/layernorm/fused_eh_norm.py:18, is_supported_fused_eh_norm_hidden_size),
# and NemotronHConfig's default for `mamba_n_groups` (srt/configs/nemotron_h.py:277).
_EH_NORM_SIZES = range(512, 8192 + 1, 256)
_MAMBA_GROUPS_DEFAULT = 8


def gpu_refusal(architecture: str, config: Mapping[str, object], flags: Sequence[str]) -> str | None:
    """Why SGLang 0.5.17 on the GPU will not start or serve this model (its config's class and
    keys) under the command line `flags` (the preset's with the profile's), or None: each is a
    condition read in 0.5.17's code, file and line named, that failed a start on the H200
    (docs/gpu/nondense-and-features.md, "What failed to start"), checked before a start that
    takes minutes.

    MTP on a DeepSeek-V3 outside the sizes of SGLang's fused norm kernel; the `--model-build
    speculative` one (hidden 512) is taken:

    >>> mtp = ["--attention-backend", "triton", "--speculative-algorithm", "EAGLE"]
    >>> gpu_refusal("DeepseekV3ForCausalLM", {"hidden_size": 256}, mtp)[:38]
    'its MTP draft fuses two norms in fused'
    >>> gpu_refusal("DeepseekV3ForCausalLM", {"hidden_size": 512}, mtp) is None
    True

    NemotronH on Triton attention; its tiny shape on FA3 when its config names its groups twice alike:

    >>> gpu_refusal("NemotronHForCausalLM", {}, ["--attention-backend", "triton"])[:46]
    'SGLang asserts `attention_backend != "triton"`'
    >>> gpu_refusal("NemotronHForCausalLM", {"n_groups": 1, "mamba_n_groups": 1}, ["--attention-backend", "fa3"]) is None
    True
    """
    given = dict(flag_pairs(flags))  # the last value of each flag, as argparse takes it
    served = given.get("--dtype") or "auto"
    if (architecture in ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM")
            and given.get("--speculative-algorithm") in ("EAGLE", "NEXTN")
            and "--speculative-draft-model-path" not in given
            and config.get("hidden_size") not in _EH_NORM_SIZES):
        # The draft is the model's own next-token layer (arg_groups/speculative_hook.py:576,
        # configs/model_config.py:580 makes it DeepseekV3ForCausalLMNextN), whose forward on CUDA
        # calls fused_eh_norm (models/deepseek_nextn.py:234), which raises for any other size.
        return (f"its MTP draft fuses two norms in fused_eh_norm, which takes \"hidden_size > 256 and hidden_size "
                f"<= 8192 and hidden_size % 256 == 0\" (sglang/kernels/ops/layernorm/fused_eh_norm.py:19), and this "
                f"DeepSeek-V3's hidden_size is {_said(config.get('hidden_size'))}: `--model-build speculative` builds it at 512")
    if architecture == "GptOssForCausalLM":
        checkpoint = config.get("dtype") or config.get("torch_dtype")
        if served == "auto":  # SGLang's `auto`: float16 for a float32 checkpoint (configs/model_config.py:1669)
            served = "float16" if checkpoint == "float32" else str(checkpoint)
        if isinstance(checkpoint, str) and checkpoint != served:
            # The rest of the model is built in the served type (the loader's default dtype).
            return (f"SGLang's GPT-OSS builds its attention and router in the checkpoint's type (\"params_dtype="
                    f"config.dtype\", sglang/srt/models/gpt_oss.py:253, :556), {_said(checkpoint)} here, and the rest in "
                    f"--dtype {_said(served)}: its first forward fails (\"mat1 and mat2 must have the same dtype\"); a "
                    f"{served} checkpoint is served (`--model-arch gpt-oss` builds one for sglang-gpu)")
    if architecture in ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM"):
        if given.get("--attention-backend") == "triton":
            return ("SGLang asserts `attention_backend != \"triton\"` for NemotronH: \"does not support triton "
                    "attention backend, as the first layer might not be an attention layer\" "
                    "(sglang/srt/server_args.py:5503); the `hybrid-fa3` profile serves it on FA3")
        groups, mamba_groups = config.get("n_groups"), config.get("mamba_n_groups", _MAMBA_GROUPS_DEFAULT)
        if groups is not None and groups != mamba_groups:
            # Transformers reads the two keys as one (`mamba_n_groups` wins); SGLang sizes the Mamba
            # state by the first and builds the mixer's conv1d and in_proj by the second.
            return (f"SGLang's NemotronH sizes its Mamba state by n_groups ({_said(groups)}, sglang/srt/configs/nemotron_h.py:430) "
                    f"but its mixer by mamba_n_groups ({_said(mamba_groups)}{', its default' if 'mamba_n_groups' not in config else ''}, "
                    f"sglang/srt/models/nemotron_h.py:519): the loader cannot fit conv1d's weight (\"exceeds dimension size\")")
    return None


def _said(value: object) -> str:
    """A config value as a refusal quotes it: a model's config.json may hold anything, and the
    refusal stays one short line of plain ASCII (`ascii` escapes newlines and control bytes).

    >>> _said(512), _said("bfloat16"), len(_said(list(range(1000))))
    ('512', "'bfloat16'", 40)
    """
    return ascii(value)[:40]


def _gpu_refuse(inputs: LaunchInputs, argv: Sequence[str]) -> None:
    refusal = gpu_refusal(inputs.architecture(), inputs.model_config, with_flags(argv, inputs.flags))
    if refusal is not None:
        raise UsageError(f"sglang-gpu {inputs.version} will not serve {inputs.model}: {refusal}")


def _cpu_plan(inputs: LaunchInputs) -> Plan:
    refusal = cpu_refusal(inputs.architecture(), inputs.model_config)
    if refusal is not None:
        raise UsageError(f"sglang-cpu {inputs.version} will not serve {inputs.model}: {refusal}")
    argv = cpu_argv(inputs.program, inputs.model, dtype=inputs.arg("dtype", inputs.model_dtype),
                    page_size=inputs.page(1))
    interpreted = ("triton-interpreter",) if inputs.version in INTERPRETED else ()
    env = cpu_env(inputs.standins, inputs.version, pythonpath=inputs.pythonpath)
    return Plan("sglang", tuple(argv), env, start_timeout_s=START_TIMEOUT_S, standins=("sgl_kernel", *interpreted))


def _gpu_plan(inputs: LaunchInputs) -> Plan:
    argv = gpu_argv(inputs.program, inputs.model, page_size=inputs.page(1))
    _gpu_refuse(inputs, argv)
    return Plan("sglang", tuple(argv), gpu_env(inputs.site, inputs.pythonpath), start_timeout_s=GPU_START_TIMEOUT_S,
                device="cuda")


def _cpu_command(c: CommandInputs) -> Built:
    if "sgl_kernel" not in c.standins:
        flags, bad = flag_words(FLAGS, c.server_args)
        argv = ["python3", "-m", "sglang.launch_server", "--model-path", path_word(c.server_args.get("model_path"), "MODEL")]
        return [*argv, *flags], dict(c.env), list(bad)
    # Made by `--launch sglang-cpu`: the preset's command and environment (the CPU engine,
    # the stand-in kernel package on PYTHONPATH, Triton's interpreter where the version needs
    # it) with the profile's flags from servefuzz's table; MODEL_DIR is `servefuzz model
    # build DIR`'s DIR/hf-float32, STANDINS_DIR servefuzz's src/servefuzz/standins.
    preset = cpu_argv("python3", Path("MODEL_DIR"), dtype=str(c.server_args.get("dtype") or "float32"),
                      page_size=c.page_size or 1)
    flags = with_flags(preset[1:], c.profile.flags) if c.profile is not None else preset[1:]
    cpu = {k: v for k, v in cpu_env("STANDINS_DIR", c.version).items() if k in ("SGLANG_USE_CPU_ENGINE", "TRITON_INTERPRET")}
    env = {**cpu, "PYTHONPATH": "STANDINS_DIR", **{k: v for k, v in c.env.items() if k != "PYTHONPATH"}}
    return ["python3", *without_flags(flags, {"--port"})], env, []


def _gpu_command(c: CommandInputs) -> Built:
    # Made by `--launch sglang-gpu`: the GPU preset's command with the profile's flags and
    # variables from servefuzz's table.
    preset = gpu_argv("python3", Path("MODEL_DIR"), page_size=c.page_size or 1)
    flags = with_flags(preset[1:], c.profile.flags) if c.profile is not None else preset[1:]
    env = dict(c.env) | (dict(c.profile.env) if c.profile is not None else {})
    return ["python3", *without_flags(flags, {"--port"})], env, []


_FA3_NEEDS = "a bundle made by `scripts/gpu_bundle.sh sglang@0.5.17+fa3` and a model of head dim 64 (bfloat16)"

_FLASHINFER_NEEDS = ("FlashInfer's modules prebuilt: the pack of `scripts/gpu_run.sh flashinfer-jit` in .gpu/, "
                     "its sha256 in scripts/gpu-flashinfer.sha256; a model of head dim 64 (bfloat16)")
_FLASHINFER_ENV = (("FLASHINFER_DISABLE_JIT", "1"),)

_PAGE_64 = ("a paged KV pool of 64-token pages (the seed report's block size): prefixes reused page by page",
            "paged KV (page size)")

CPU_PROFILES: tuple[Profile, ...] = (
    Profile("sglang-cpu", "default", (),
            "the preset as it is: page size 1, radix cache, overlap scheduler, an 8192-token KV pool", "none"),
    # The seed report's block size (sgl-project/sglang#22819): the radix cache then matches
    # prefixes in whole pages of 64, and prompts end on, before and after page boundaries.
    Profile("sglang-cpu", "page-64", ("--page-size", "64"), *_PAGE_64, rows=(("--page-size 16", "paged KV (page size)"),),
            aims=("page-boundary", "burst-reuse", "tile-boundary"), features=(Feature.PREFIX_CACHE,)),
    # Prefill in 64-token chunks: every prompt over 64 tokens spans steps, next to decodes.
    Profile("sglang-cpu", "chunked", ("--chunked-prefill-size", "64"),
            "chunked prefill: prompts prefilled 64 tokens a step",
            "chunked prefill", aims=("chunk-boundary", "page-boundary"), features=(Feature.CHUNKED_PREFILL,)),
    # 1024 tokens of KV for up to 32 requests: a few long ones fill it, and the scheduler
    # retracts running requests and evicts the radix tree (retraction under memory pressure).
    Profile("sglang-cpu", "tiny-pool", ("--max-total-tokens", "1024", "--max-running-requests", "32"),
            "retraction and eviction: a 1024-token KV pool shared by up to 32 requests",
            "KV pool size (retraction, eviction)", aims=("eviction", "cancel-storm"),
            features=(Feature.PREEMPTION, Feature.EVICTION)),
    Profile("sglang-cpu", "no-overlap", ("--disable-overlap-schedule",),
            "the scheduler without its overlap of CPU scheduling and the forward pass",
            "overlap scheduler", aims=("batch-sweep", "burst-reuse")),
)

GPU_PROFILES: tuple[Profile, ...] = (
    Profile("sglang-gpu", "default", (),
            "SGLang's GPU defaults: bfloat16, page size 1, radix cache, overlap scheduler, CUDA graphs, "
            f"chunked prefill ({GPU_CHUNK}-token chunks: under the tiny models' context)", "none"),
    Profile("sglang-gpu", "page-64", ("--page-size", "64"), *_PAGE_64, rows=(("--page-size 16", "paged KV (page size)"),),
            aims=("page-boundary", "burst-reuse", "tile-boundary"), features=(Feature.PREFIX_CACHE,)),
    Profile("sglang-gpu", "no-overlap", ("--disable-overlap-schedule",),
            "the scheduler without its overlap of CPU scheduling and the forward pass",
            "overlap scheduler", aims=("batch-sweep", "burst-reuse")),
    # SGLang's deterministic control as a whole campaign (batch-invariant kernels; Triton
    # attention is one of the backends it takes).
    Profile("sglang-gpu", "deterministic", ("--enable-deterministic-inference",),
            "deterministic inference (batch-invariant kernels): outputs independent of the batch",
            "batch numerics (deterministic inference)", aims=("batch-sweep", "burst-reuse")),
    # The attention backend SGLang picks on Hopper, FA3, in place of the preset's Triton. The
    # bundle carries it only when made with `sglang@0.5.17+fa3`, cut to head dim 64 in bfloat16
    # (scripts/gpu_bundle.sh): another head dim fails at its first forward ("no kernel image").
    Profile("sglang-gpu", "fa3", ("--attention-backend", "fa3"),
            "FlashAttention 3 attention (SGLang's default on Hopper): paged prefill, extend after a "
            "radix hit, decode", "attention backend kernels (FA3)", needs=_FA3_NEEDS,
            aims=("page-boundary", "burst-reuse", "tile-boundary")),
    # Both at once, the configuration of sgl-project/sglang#22819's thread and of
    # docs/findings/sglang-gpu-fa3-deterministic: FA3's extend path after a radix prefix hit
    # under the batch-invariance promise.
    Profile("sglang-gpu", "fa3-deterministic", ("--attention-backend", "fa3", "--enable-deterministic-inference"),
            "deterministic inference on FA3: outputs independent of the batch and of radix prefix hits",
            "batch numerics (deterministic inference on FA3)", needs=_FA3_NEEDS,
            aims=("burst-reuse", "batch-sweep", "eviction", "tenant-salt")),
    # FlashInfer attention, which SGLang 0.5.17 JIT-compiles on first use (4 modules, 254 s on the
    # H200 with the image's nvcc). Its modules come prebuilt: `gpu_run.sh flashinfer-jit` makes
    # the pack once, scripts/gpu-flashinfer.sha256 pins it, and gpu_run.sh unpacks it into
    # FlashInfer's AOT folder (flashinfer/data/aot), where 0.6.15's JitSpec loads a module
    # without building it. FLASHINFER_DISABLE_JIT: a module missing from the pack stops the server
    # at once (MissingJITCacheError) instead of compiling past the start timeout.
    Profile("sglang-gpu", "flashinfer", ("--attention-backend", "flashinfer"),
            "FlashInfer attention: paged prefill, extend after a radix hit, decode (prebuilt JIT modules)",
            "attention backend kernels (FlashInfer)", needs=_FLASHINFER_NEEDS,
            aims=("page-boundary", "burst-reuse", "tile-boundary"), env=_FLASHINFER_ENV),
    # SGLang 0.5.17 takes flashinfer for deterministic inference (DETERMINISTIC_ATTENTION_BACKEND_CHOICES)
    # but not with the radix cache: it turns the radix cache off itself (its server_args:
    # "radix cache is not compatible with flashinfer attention backend for deterministic
    # inference"), so this campaign has no prefix hits to compare.
    Profile("sglang-gpu", "flashinfer-deterministic", ("--attention-backend", "flashinfer", "--enable-deterministic-inference"),
            "deterministic inference on FlashInfer (radix cache off, by SGLang): outputs independent of the batch",
            "batch numerics (deterministic inference on FlashInfer)", needs=_FLASHINFER_NEEDS,
            aims=("batch-sweep", "n-mix"), env=_FLASHINFER_ENV),
    # The Mamba / gated-delta-net hybrids (Qwen3-Next, NemotronH): their state pool capped at
    # 256 slots. Left to itself SGLang 0.5.17 sizes it from a share of the free GPU memory
    # (kv_cache_configurator), which a server started beside others must not take.
    Profile("sglang-gpu", "hybrid", ("--max-mamba-cache-size", "256"),
            "a Mamba / gated-delta-net hybrid: linear-attention states cached beside the radix tree",
            "hybrid state cache (Mamba radix cache)", needs="a hybrid model: `--model-arch qwen3-next` or nemotron-h",
            aims=("burst-reuse", "chunk-boundary", "batch-sweep"), features=(Feature.PREFIX_CACHE,)),
    # The same on FA3: SGLang 0.5.17 refuses NemotronH on Triton attention ("the first layer
    # might not be an attention layer", measured on the H200).
    Profile("sglang-gpu", "hybrid-fa3", ("--attention-backend", "fa3", "--max-mamba-cache-size", "256"),
            "a Mamba hybrid on FA3 attention (NemotronH): linear-attention states cached beside the radix tree",
            "hybrid state cache (Mamba radix cache, FA3)", needs=_FA3_NEEDS + "; a hybrid model: `--model-arch nemotron-h`",
            aims=("burst-reuse", "chunk-boundary", "batch-sweep"), features=(Feature.PREFIX_CACHE,)),
    # KV cache stored in fp8 (e4m3, scale 1.0) by the preset's Triton attention: every cached
    # token is quantized once and read back by decode and by an extend after a radix hit
    # (sglang#35938's class: fp8 KV read back wrong after reuse).
    Profile("sglang-gpu", "fp8-kv", ("--kv-cache-dtype", "fp8_e4m3"),
            "fp8 (e4m3) KV cache: cached tokens quantized, read back by decode and radix-hit extends",
            "KV cache dtype (fp8)", aims=("burst-reuse", "page-boundary", "batch-sweep"),
            features=(Feature.PREFIX_CACHE,)),
    # N-gram speculative decoding (SGLang's C++ n-gram corpus, JIT-built at start; drafts
    # verified as a tree by Triton attention): drafts come from the request's own tokens.
    Profile("sglang-gpu", "spec-ngram", ("--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"),
            "n-gram speculative decoding (drafts from earlier tokens, 4 drafted tokens verified per step)",
            "speculative decoding (n-gram)", aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # Multi-token prediction through DeepSeek-V3's next-token layer (SGLang's EAGLE worker on
    # the model's own `num_nextn_predict_layers` layer; 3 steps, top-1, 4 draft tokens chosen
    # by SGLang for DeepseekV3ForCausalLM). Triton MLA attention for target and draft.
    Profile("sglang-gpu", "spec-mtp", ("--speculative-algorithm", "EAGLE"),
            "MTP speculative decoding through DeepSeek-V3's next-token layer (EAGLE worker, 3 steps)",
            "speculative decoding (MTP)", needs="a DeepSeek-V3 model with its next-token layer and a hidden "
            "size over 256 (SGLang 0.5.17's fused_eh_norm refuses 256: measured on the H200): "
            "`--model-arch deepseek-v3 --model-build speculative` (hidden 512, drafts that agree)",
            aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # HiCache: a 4,096-token device pool (page 16) backed by a host pool twice its size, so that
    # radix pages are written to host memory, evicted from the GPU and loaded back on a later
    # hit (`sglang:load_back_tokens_total` counts the tokens that came back).
    Profile("sglang-gpu", "hicache",
            ("--enable-hierarchical-cache", "--hicache-ratio", "2", "--max-total-tokens", "4096", "--page-size", "16"),
            "hierarchical cache: a 4,096-token device pool, radix pages evicted to host memory and loaded back",
            "hierarchical cache (host tier)", aims=("eviction", "burst-reuse", "page-boundary"),
            features=(Feature.HOST_CACHE, Feature.EVICTION, Feature.PREFIX_CACHE)),
    # The CPU preset's pressure profile on the GPU: 1,024 tokens of KV for up to 32 requests, so
    # that long decodes outgrow the pool and the scheduler retracts running requests
    # (`sglang:num_retracted_requests_total`) and evicts the radix tree.
    Profile("sglang-gpu", "tiny-pool", ("--max-total-tokens", "1024", "--max-running-requests", "32"),
            "retraction and eviction: a 1024-token KV pool shared by up to 32 requests",
            "KV pool size (retraction, eviction)", aims=("eviction", "cancel-storm"),
            features=(Feature.PREEMPTION, Feature.EVICTION)),
)

CPU_PRESET = Preset("sglang-cpu", CPU_VERSIONS, _cpu_plan, _cpu_command, profiles=CPU_PROFILES,
                    install="scripts/setup_engines.sh sglang", module="sglang")
# Found as vllm-gpu's is (engines/vllm.py): the user's install, or the cache's venv or bundle.
# GPT-OSS in bfloat16: SGLang builds its attention and router in the checkpoint's type (`gpu_refusal`).
GPU_PRESET = Preset("sglang-gpu", GPU_VERSIONS, _gpu_plan, _gpu_command, device="cuda", program_named_by="python",
                    profiles=GPU_PROFILES, install=GPU_INSTALL, install_version=GPU_INSTALL, installer="gpu-wheel",
                    arch_dtypes={"gpt-oss": "bfloat16"}, module="sglang")


def facts(args: Mapping[str, object]) -> ServerFacts:
    """SGLang's server args (`/server_info`), normalized; the reference engine speaks the same.

        >>> f = facts({"context_length": 4096, "chunked_prefill_size": 512, "max_running_requests": 8,
        ...            "page_size": 16, "cuda_graph_bs": [4, 1, 2], "disable_radix_cache": False})
        >>> f.context_length, f.chunk_budget, f.max_running, f.page_size, f.capture_sizes, f.prefix_caching
        (4096, 512, 8, 16, (1, 2, 4), True)
        >>> facts({"grammar_backend": "none"}).constraints, facts({"grammar_backend": "xgrammar"}).constraints
        (False, True)

    HiCache's host pool is `--hicache-ratio` times the device pool, unless `--hicache-size` sizes
    it in gigabytes (then its tokens depend on the model's KV bytes, which the args do not say):

        >>> f = facts({"enable_hierarchical_cache": True, "hicache_ratio": 2.0, "hicache_size": 0,
        ...            "max_total_num_tokens": 4096})
        >>> f.host_tier, f.host_tier_tokens, facts({"enable_hierarchical_cache": False}).host_tier
        (True, 8192, False)

    Without `--context-length` the model's own decides, which the args leave null; the scheduler's
    longest admitted prompt (`max_req_input_len`, a few tokens under it) then bounds the context:

        >>> facts({"context_length": None, "max_req_input_len": 2042}).context_length
        2043
    """
    # `--grammar-backend none` (the CPU preset's: no grammar backend runs there) answers every
    # constrained request with a 400; the campaign then sends none.
    grammar = args.get("grammar_backend")
    return ServerFacts(
        context_length=positive_arg(args, "context_length") or _admitted(args),
        chunk_budget=positive_arg(args, "chunked_prefill_size"),
        max_running=positive_arg(args, "max_running_requests"),
        page_size=positive_arg(args, "page_size"),
        capture_sizes=sizes_arg(args, "cuda_graph_bs"),
        prefix_caching=flag_arg(args, "disable_radix_cache", inverted=True),
        pool_tokens=positive_arg(args, "max_total_tokens"),
        constraints=grammar != "none" if isinstance(grammar, str) else None,
        host_tier=flag_arg(args, "enable_hierarchical_cache"),
        host_tier_tokens=_host_tokens(args),
    )


def _host_tokens(args: Mapping[str, object]) -> int | None:
    """HiCache's host pool in tokens: `hicache_ratio` x the device pool (the scheduler's sized
    one, `max_total_num_tokens`, else the flag), where no `hicache_size` overrides the ratio."""
    if args.get("enable_hierarchical_cache") is not True or positive_arg(args, "hicache_size"):
        return None
    ratio, pool = args.get("hicache_ratio"), positive_arg(args, "max_total_num_tokens", "max_total_tokens")
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or ratio <= 0 or pool is None:
        return None
    return int(ratio * pool)


def _admitted(args: Mapping[str, object]) -> int | None:
    """The context a request may fill, as the scheduler admits it: its longest prompt plus one
    token out. Read where the args leave the context to the model (SGLang 0.5.10.post1 on the CPU,
    whose 2,048-token model was taken for 4,096: prompts of 2,324 tokens answered 400)."""
    longest = positive_arg(args, "max_req_input_len")
    return None if longest is None else longest + 1


SPEC = EngineSpec(
    "sglang",
    default_port=30000,
    salts=True,  # `extra_key`, what SGLang's own OpenAI layer makes of `cache_salt`
    # `seeds` False: its `sampling_params.sampling_seed` is sent, but its promise is not measured
    # here (docs/engines.md, Seeds).
    choices=True,  # a `regex` alternation
    adapters=True,  # `lora_path`
    deterministic=DETERMINISTIC,
    issue_key="sglang",
    arg_features=SERVER_ARG_FEATURES,
    flags=FLAGS,
    triage=TRIAGE,
    presets=(CPU_PRESET, GPU_PRESET),
    model_format="hf",
    bug_form=BUG_FORM,
    meters=METERS,
    switches=SWITCHES,
    chunk_flag="--chunked-prefill-size",
    facts=facts,
    metrics_flag="--enable-metrics",
    # The scheduler (scheduler.py and its scheduler_*_mixin.py files), the batch and its policy,
    # the radix cache and KV pools and allocators (mem_cache/), and the sampler.
    traced=("sglang/srt/managers/scheduler", "sglang/srt/managers/schedule_batch.py",
            "sglang/srt/managers/schedule_policy.py", "sglang/srt/mem_cache/", "sglang/srt/layers/sampler.py"),
)
