"""repro_full.py: one standalone script per finding that replays it, standard library only.

The script is `templates/repro.py.tmpl` with the finding baked in as *data*: a JSON text in a
Python string literal (written with `repr`, so nothing in the finding can become code), parsed
with `json.loads` when the script starts. What it holds is the replay plan: the exact request
bodies servefuzz's own adapter for the finding's engine sends (so the script and `servefuzz
replay` send the same bytes), each request's offset and cancel time, the requests expected to
diverge, and how to flush the engine's cache.

    >>> from servefuzz.anomaly import Anomaly, Oracle, Verdict
    >>> from servefuzz.finding import Finding
    >>> from servefuzz.server_facts import TargetInfo
    >>> from servefuzz.workload import RequestSpec, Scenario
    >>> sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6), 2),))
    >>> f = Finding(3, 1, sc, TargetInfo("sglang", "http://127.0.0.1:30000"),
    ...             (Anomaly(Oracle.REPLAY, Verdict.CORRUPTION, "r01", "r01 diverged"),))
    >>> plan = replay_plan(f)
    >>> plan["path"], plan["flush"], plan["requests"][0]["body"]["input_ids"]
    ('/generate', 'sglang', [5, 6])
    >>> compile(repro_script(f), "repro_full.py", "exec") is not None
    True
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import inspect
import json
import re
import string
import zlib
from importlib import resources
from typing import Any

from servefuzz import stats, terms, truth
from servefuzz.anomaly import Verdict
from servefuzz.engines.registry import spec_of
from servefuzz.errors import UsageError
from servefuzz.finding import Finding
from servefuzz.models import DTYPES, hf_tokenizer_json
from servefuzz.models import files as model_formats
from servefuzz.models import llama as llama_model
from servefuzz.oracles.judge import Expectation
from servefuzz.reports.commands import server_command
from servefuzz.runner import RunConfig
from servefuzz.targets import make_target
from servefuzz.targets.base import HttpTarget, ReproDialect, cut_in_prefill

__all__ = ["MODEL_DIR", "replay_plan", "repro_script", "served_command"]

_LINE = 96  # characters of JSON per line of the embedded literal
# What repro_full.py's model writer takes of `truth`: the names llama.cpp gives a llama's tensors.
_TRUTH_TABLES = ("GGUF_LAYER_NAMES", "GGUF_MODEL_NAMES")


def replay_plan(finding: Finding) -> dict[str, Any]:
    """Everything the script needs, JSON-ready: the request bodies of the finding's dialect."""
    info = finding.target
    top_k = RunConfig().top_k  # what the runner asks for, so the server does the same work
    # The llama.cpp adapter takes cache_prompt from its construction; the finding recorded it.
    if spec_of(info.engine).cache_prompt:
        # Adapters by id: the finding lists them in the order /lora-adapters gave them.
        target = make_target(info.engine, info.base_url, cache_prompt=info.facts.prefix_caching is not False,
                             adapters=info.adapters)
    else:
        target = make_target(info.engine, info.base_url)
    model = info.server_args.get("model")
    speaker, dialect = _dialect(target)
    requests = []
    for spec in finding.scenario.requests:
        copies = 1
        if dialect.n_as_requests and spec.n > 1 and not spec.sampled:
            # vLLM rejects n > 1 at temperature 0; its adapter sends n requests of n = 1.
            copies, spec = spec.n, dataclasses.replace(spec, n=1)
        body = speaker.repro_body(spec, top_k=top_k, model=model)
        entry = {"id": spec.id, "offset_ms": spec.offset_ms, "cancel_after_ms": spec.cancel_after_ms, "copies": copies, "body": body}
        if cut_in_prefill(target, spec) and spec.cancel_at_prefill is not None:
            # Cut where the prefill's progress reaches it, as the adapter does (at most the prompt).
            entry["cancel_at_prefill"] = min(spec.cancel_at_prefill, spec.prompt_len)
        if spec.adapter is not None:
            entry["adapter"] = spec.adapter  # the body names it; the script's --model must not replace it
        requests.append(entry)
    # Requests whose cache-state anomaly reproduces when they are probed warm and primed again;
    # the priming request is the bare shared prefix, one token long, as `trial` sends it.
    specs = finding.scenario.by_id()
    expect = Expectation.of(finding)
    probes = []
    for rid in expect.probed:
        spec = specs[rid]
        bare = dataclasses.replace(spec, id=f"{spec.id}~prefix", prompt_ids=spec.prompt_ids[: spec.prefix_len],
                                   max_tokens=1, n=1, stream=False)
        probes.append({"id": rid, "prime": speaker.repro_body(bare, top_k=top_k, model=model)})
    flush = dialect.flush
    return {
        "name": finding.filename,
        "bug": f"{finding.verdict.value} ({finding.signature})",
        "expected": [] if expect.about_failure else list(expect.flagged),
        "expect_failure": finding.verdict.value if expect.about_failure else None,
        # A contract violation: the mode and the engine's promise, which the expectation quotes
        # (any divergence at all breaks it, however near the tie).
        "promise": None if (p := finding.headline.promise) is None else p.to_json(),
        # An isolation breach comes back where the request again reports more cached tokens
        # than its own salt allows (oracles.tenancy.breached_in): request id -> that allowance.
        "expect_cached": {a.request_id: int(a.evidence.get("allowed", 0)) for a in expect.anomalies
                          if a.verdict is Verdict.ISOLATION_BREACH},
        # Structured outputs: each constrained request's choices, which the script checks every
        # answer against (an answer that is no prefix of any choice broke its own constraint).
        "choices": {rid: list(choices) for rid, choices in finding.scenario.constrained.items()},
        "base_url": info.base_url,
        "dialect": dialect.reads,
        "path": dialect.path,
        "flush": flush,
        "model": model,
        "requests": requests,
        "probes": probes,
        # Where --serve asks whether the server is up: every engine with a cache flush has
        # /health; a generic OpenAI server is asked for its models.
        "health": "/health" if flush is not None else "/v1/models",
        # The alone run's words: "with the other request" or "with the other N requests".
        "others": len(finding.scenario.requests) - 1,
        "model_files": model_files(finding),
    }


# The folder the presets' default models live in (`engine_files.default_models`: seed 0, float32),
# and the name vLLM's presets serve them under.
_TINY_FOLDER = "tiny-seed0"
_TINY_SERVED = "tiny"


MODEL_DIR = "./tiny"  # where the reports' commands say `repro_full.py --write-model` puts the model


def served_command(finding: Finding, *, multiline: bool = False) -> str:
    """The server command with the model paths where `repro_full.py --write-model ./tiny` puts
    them (the cache's own paths where servefuzz built none), as issue.md and minimal_repro.py give it."""
    command = server_command(finding.target, multiline=multiline)
    files = model_files(finding)
    if files is None:
        return command
    command = re.sub(r"\S*/tiny-seed0(?=/)", MODEL_DIR, command)
    command = command.replace("LORA_DIR", f"{MODEL_DIR}/lora")
    return command.replace("MODEL_DIR", f"{MODEL_DIR}/hf-{files['dtype']}")


def model_files(finding: Finding) -> dict[str, Any] | None:
    """What `repro_full.py --write-model DIR` writes: the tiny model the finding ran on (format,
    seed, dtype, its adapters, and for a Hugging Face folder the tokenizer servefuzz trained,
    zlib-compressed and base64'd, as data). None where the server served no model of
    servefuzz's presets (a user's own model, the reference engine's built-in one)."""
    info = finding.target
    fmt = spec_of(info.engine).model_format
    paths = [str(info.server_args.get(key) or "") for key in ("model_path", "model")]
    ours = any(f"/{_TINY_FOLDER}/" in p for p in paths) or info.server_args.get("model") == _TINY_SERVED
    if not fmt or not ours:
        return None
    dtype = str(info.server_args.get("dtype") or "float32")
    files: dict[str, Any] = {"format": fmt, "seed": 0, "dtype": dtype if dtype in DTYPES else "float32",
                             "adapters": bool(info.adapters)}
    if fmt == "hf":
        try:
            text = hf_tokenizer_json(0).encode("utf-8")
        except UsageError:  # no `tokenizers` here (the models extra): the script says it cannot write it
            files["tokenizer"] = None
        else:
            files["tokenizer"] = base64.b64encode(zlib.compress(text, 9)).decode("ascii")
    return files


def model_source() -> str:
    """`models/files.py`, the tensor-name tables of `truth.py` (its two assignments alone) and
    `models/llama.py` as repro_full.py embeds them: verbatim but for their `__future__` imports (which
    must open a file, and the script's own has) and llama's imports of `files` and `truth` (whose
    names the first two parts have already defined)."""
    parts = []
    for module in (model_formats, truth, llama_model):
        text = inspect.getsource(module)
        lines = text.splitlines(keepends=True)
        tree = ast.parse(text).body
        if module is truth:
            tables = [node for node in tree if isinstance(node, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id in _TRUTH_TABLES for t in node.targets)]
            parts.append("".join("".join(lines[node.lineno - 1:node.end_lineno]) for node in tables) + "\n\n")
            continue
        drop: set[int] = set()
        for node in tree:
            if isinstance(node, ast.ImportFrom) and (node.level or node.module == "__future__"):
                drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        parts.append("".join(line for n, line in enumerate(lines, 1) if n not in drop))
    return "".join(parts)


def _dialect(target: object) -> tuple[HttpTarget, ReproDialect]:
    """The adapter and how the script speaks its dialect (its `repro`); one it cannot speak is
    a UsageError, one line."""
    dialect = getattr(target, "repro", None)
    if not isinstance(target, HttpTarget) or not isinstance(dialect, ReproDialect):
        raise UsageError(f"repro_full.py cannot speak the {getattr(target, 'engine', '?')!r} dialect yet")
    return target, dialect


def repro_script(finding: Finding) -> str:
    """The text of the standalone repro_full.py for `finding`."""
    text = json.dumps(replay_plan(finding), ensure_ascii=True, separators=(",", ":"))
    # Adjacent string literals concatenate: the JSON spread over short lines, each one `repr`'d.
    literal = "\n".join("    " + repr(text[i : i + _LINE]) for i in range(0, len(text), _LINE))
    template = resources.files("servefuzz.reports").joinpath("templates/repro.py.tmpl").read_text(encoding="utf-8")
    # One substitution pass: values are never scanned for placeholders themselves.
    # servefuzz.stats is standard-library only and embedded verbatim: the script decides
    # "reproduced", "not reproduced" or "undecided" exactly as servefuzz does.
    stats_source = inspect.getsource(stats)
    # So is servefuzz.terms.first_difference: the script names the token servefuzz would.
    first_difference_source = inspect.getsource(terms.first_difference)
    return string.Template(template).substitute(finding_name=finding.filename, finding_literal=literal,
                                                stats_source=stats_source, first_difference_source=first_difference_source,
                                                model_source=model_source())
