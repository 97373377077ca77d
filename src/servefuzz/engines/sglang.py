"""SGLang: its native dialect (`/generate`, `/flush_cache`, `/server_info`)."""

from __future__ import annotations

from servefuzz.engine_flags import Flag, FlagVariant, Kind, variant
from servefuzz.engines.spec import ArgFeature, BugForm, Deterministic, EngineSpec, Versions

__all__ = ["BUG_FORM", "CPU_VERSIONS", "DETERMINISTIC", "FLAGS", "GPU_VERSIONS", "SERVER_ARG_FEATURES", "SPEC", "TRIAGE"]

# SGLang's deterministic inference (batch-invariant kernels) refuses to start with its CPU
# attention backend (measured): on the CPU there is none.
DETERMINISTIC = Deterministic("--enable-deterministic-inference", flag="--enable-deterministic-inference",
                              on_cpu=False, server_arg="enable_deterministic_inference")

# The trigger features SGLang's `/server_info` args show (the reference engine reports the same).
SERVER_ARG_FEATURES = (
    ArgFeature("radix-cache", "disable_radix_cache", False, "the server ran with the radix cache on"),
    ArgFeature("overlap", "disable_overlap_schedule", False, "the server ran with the overlap scheduler on",
               unless_deterministic=True),
    ArgFeature("cuda-graph", "disable_cuda_graph", False, "the server ran with (padded) CUDA-graph decode on"),
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
    Flag("disable_radix_cache", "--disable-radix-cache", Kind.BOOL),
    Flag("disable_overlap_schedule", "--disable-overlap-schedule", Kind.BOOL),
    Flag("disable_cuda_graph", "--disable-cuda-graph", Kind.BOOL),
    Flag("enable_deterministic_inference", "--enable-deterministic-inference", Kind.BOOL),
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
# On the H200: sglang 0.5.17 with sglang-kernel 0.4.5, built against the image's torch 2.11.0.
GPU_VERSIONS = Versions("0.5.17", "sglang-gpu")

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
    cpu_preset="sglang-cpu",
    gpu_preset="sglang-gpu",
    model_format="hf",
    bug_form=BUG_FORM,
    cpu_versions=CPU_VERSIONS,
    gpu_versions=GPU_VERSIONS,
)
