"""repro_full.py against real reference engines: CONFIRMED on the faulty one, NOT REPRODUCED on the
cured one, standard library only (run with `python -I -S`, so nothing but the standard library
can be imported), and the finding baked in as data that can never become code.

The finding is made by servefuzz's own pipeline (execute + judge) from a minimal scenario that
triggers the planted page-boundary-prefix fault: a long prompt keeps the engine busy while three
requests sharing exactly one page (64 tokens) arrive together and land in one extend batch; the
second and third gather the first's page before its KV is written. On a fresh server that page
still holds zeros, so the first run after start-up is corrupted, deterministically.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from report_findings import HOSTILE, PAGE_BOUNDARY_FAULT, found_on, page_boundary, seed_like

from servefuzz.finding import Finding, load_finding
from servefuzz.launcher import ServerProcess, free_port
from servefuzz.reports.repro import replay_plan, repro_script
from servefuzz.server_facts import TargetInfo
from servefuzz.workload import PromptBuilder, RequestSpec, Scenario

FAULT = PAGE_BOUNDARY_FAULT


@pytest.fixture(scope="module")
def finding() -> Finding:
    with ServerProcess.reference(FAULT) as srv:
        return asyncio.run(found_on(srv.base_url, page_boundary()))


def run_script(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages, no user paths, no PYTHON* variables: the standard library only.
    return subprocess.run([sys.executable, "-I", "-S", str(path), *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def script(tmp_path: Path, finding: Finding) -> Path:
    path = tmp_path / "repro_full.py"
    path.write_text(repro_script(finding), encoding="utf-8")
    return path


def test_repro_confirms_on_the_faulty_engine_and_not_on_the_cured_one(script: Path, finding: Finding) -> None:
    assert finding.verdict.backed.value == "corruption"  # a confident flip; no control has run here
    # Five runs, of which three decide it: the burst lands in one extend batch nearly always,
    # but two cores busy with the rest of the suite have split it once (then that run is exact).
    with ServerProcess.reference(FAULT) as faulty:
        p = run_script(script, "--base-url", faulty.base_url, "--runs", "5")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    # The seed report's block, line for line.
    assert lines[1] == f"  Finding  : {finding.filename}"
    assert lines[2] == f"  Bug      : {finding.verdict.value} ({finding.signature})"
    assert lines[3] == f"  Expect   : {list(finding.expected_diverging)} to diverge"
    assert lines[4] == "  Runs     : 5"
    assert "✓ (expected)" in p.stdout and "variant 2: " in p.stdout
    assert "RESULT: CONFIRMED" in lines[-3] and re.search(r"RATE   : reproduced: [345]/5", lines[-2]), p.stdout
    assert "[STABLE — " in p.stdout and "r00" in p.stdout.split("[STABLE")[1]
    # In plain words, as a bug report says it: the answer alone, the answer with the others, how often.
    words = p.stdout.split("IN PLAIN WORDS")[1]
    victim = finding.expected_diverging[0]
    assert f"    {victim}: expected (alone): [" in words
    assert re.search(r"actual \(with the other 3 requests\): (\[|the same \d+ tokens, then \[.*\] where alone gives \[)", words), words
    assert re.search(r"wrong in [345]/5 runs", words), words

    with ServerProcess.reference([]) as clean:  # no fault: the cure (8 clean runs decide it)
        p = run_script(script, "--base-url", clean.base_url, "--runs", "8")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "[DIVERGED — 0/4 requests non-deterministic]" in p.stdout
    assert "[STABLE — 4 requests consistent across all runs]" in p.stdout
    assert "RESULT: NOT REPRODUCED  (in 0/8 replays; 0/" in p.stdout


def test_the_script_imports_only_the_standard_library(script: Path) -> None:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    # numpy only where its absence is caught: --write-model needs it, the replay does not.
    guarded = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Try)
               and any(ast.unparse(h.type or ast.Name("")) == "ImportError" for h in n.handlers)
               for stmt in n.body if isinstance(stmt, ast.Import) for a in stmt.names if a.name == "numpy"}
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if id(a) not in guarded}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported and imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names
    assert guarded  # each embedded model module guards its own numpy import (models/files.py, llama.py)


def numpy_only(tmp_path: Path) -> Path:
    """A folder holding numpy and nothing else to import (no servefuzz, no site-packages)."""
    import numpy

    folder = tmp_path / "numpy-only"
    folder.mkdir()
    site = Path(numpy.__file__).parent.parent
    for name in ("numpy", "numpy.libs"):
        if (site / name).exists():
            (folder / name).symlink_to(site / name)
    return folder


def run_with_numpy(path: Path, folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -I -S and one folder: numpy importable, servefuzz not (the script checks it cannot be).
    code = (f"import sys; sys.path.append({str(folder)!r}); sys.argv = [{str(path)!r}, *{list(args)!r}]\n"
            "try:\n import servefuzz\nexcept ImportError:\n pass\nelse:\n raise SystemExit('servefuzz importable')\n"
            f"exec(compile(open({str(path)!r}, encoding='utf-8').read(), 'repro_full.py', 'exec'), {{'__name__': '__main__'}})")
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("package", ["llamacpp-lora-base-after-adapter", "vllm-cpu-lora-base-rows"])
def test_write_model_writes_the_findings_model_without_servefuzz(tmp_path: Path, package: str) -> None:
    """The repro_full.py of a finding made on servefuzz's tiny models writes them with numpy alone
    (`--write-model DIR`): byte for byte what servefuzz's model builder writes, adapters too."""
    pytest.importorskip("tokenizers")
    from servefuzz.models import build_models

    found = load_finding(Path(__file__).parents[2] / "docs/findings" / package / "finding.json")
    path = tmp_path / "repro_full.py"
    path.write_text(repro_script(found), encoding="utf-8")
    p = run_with_numpy(path, numpy_only(tmp_path), "--write-model", str(tmp_path / "tiny"))
    assert p.returncode == 0, p.stdout + p.stderr
    built = tmp_path / "built"
    build_models(built, dtype="float32", seed=0)
    written = sorted(q.relative_to(tmp_path / "tiny") for q in (tmp_path / "tiny").rglob("*") if q.is_file())
    wanted = {"llamacpp-lora-base-after-adapter": ["lora/lora-a.gguf", "lora/lora-b.gguf", "tiny.gguf"],
              "vllm-cpu-lora-base-rows": ["hf-float32/config.json", "hf-float32/model.safetensors",
                                          "hf-float32/special_tokens_map.json", "hf-float32/tokenizer.json",
                                          "hf-float32/tokenizer_config.json", "lora/lora-a/adapter_config.json",
                                          "lora/lora-a/adapter_model.safetensors", "lora/lora-b/adapter_config.json",
                                          "lora/lora-b/adapter_model.safetensors"]}[package]
    assert [str(w) for w in written] == wanted
    for rel in written:
        assert (tmp_path / "tiny" / rel).read_bytes() == (built / rel).read_bytes(), rel
    # Without numpy it says so in one line; the replay itself never needed it.
    p = run_script(path, "--write-model", str(tmp_path / "again"))
    assert p.returncode == 2 and "needs numpy" in p.stderr and "Traceback" not in p.stderr


def test_a_model_servefuzz_did_not_build_is_not_written(tmp_path: Path, script: Path) -> None:
    p = run_script(script, "--write-model", str(tmp_path / "tiny"))  # the reference engine's own model
    assert p.returncode == 2 and "did not build" in p.stderr and not (tmp_path / "tiny").exists()


def test_the_finding_is_data_that_cannot_become_code() -> None:
    plain, hostile = repro_script(seed_like()), repro_script(seed_like(hostile=True))
    tree = ast.parse(hostile)
    assert [type(n) for n in tree.body] == [type(n) for n in ast.parse(plain).body]  # nothing smuggled in
    # FINDING = json.loads(<one string constant>): data, parsed, never evaluated as code.
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "FINDING")
    assert isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "json.loads"
    (arg,) = node.value.args
    assert isinstance(arg, ast.Constant) and isinstance(arg.value, str)
    data = json.loads(arg.value)
    assert data == json.loads(json.dumps(replay_plan(seed_like(hostile=True))))
    assert any(r["id"] == "r02" + HOSTILE for r in data["requests"])


def test_no_server_is_one_line_and_exit_2(script: Path) -> None:
    p = run_script(script, "--base-url", f"http://127.0.0.1:{free_port()}", "--runs", "1")
    assert p.returncode == 2
    assert p.stderr.startswith("repro_full.py: error: cannot reach http://127.0.0.1:")
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_bad_arguments_exit_2(script: Path) -> None:
    p = run_script(script, "--runs", "0")
    assert p.returncode == 2 and "expected at least 1" in p.stderr and "Traceback" not in p.stderr


def test_every_dialect_reads_answers_streamed_or_not_and_cancels(
    tmp_path: Path, finding: Finding, reference_server: object
) -> None:
    """On a clean engine every determinate request is stable, in the sglang and openai dialects,
    streamed or not; a request cut on purpose is undetermined, never a divergence."""
    url = reference_server()  # type: ignore[operator]
    b = PromptBuilder(1, range(3, 1024))
    specs = (
        RequestSpec("plain", 0.0, b.prompt(None, 0, 40), 8),
        RequestSpec("streamed", 1.0, b.prompt(None, 0, 50), 8, stream=True),
        RequestSpec("forked", 2.0, b.prompt(None, 0, 30), 8, n=2),
        RequestSpec("cut", 3.0, b.prompt(None, 0, 3000), 200, cancel_after_ms=5.0),
    )
    for engine in ("reference", "openai"):
        f = dataclasses.replace(
            finding,
            scenario=Scenario(1, specs),
            target=dataclasses.replace(finding.target, engine=engine, server_args={}),
        )
        path = tmp_path / f"repro_{engine}.py"
        path.write_text(repro_script(f), encoding="utf-8")
        p = run_script(path, "--base-url", url, "--runs", "2")
        assert p.returncode == 1, p.stdout + p.stderr
        assert "[STABLE — 3 requests consistent across all runs]" in p.stdout, (engine, p.stdout)
        assert "forked, plain, streamed" in p.stdout
        assert "[UNDETERMINED — 1 requests without two determinate answers]" in p.stdout
        assert "[FAILURES" not in p.stdout


def test_plans_follow_each_engines_adapter() -> None:
    sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6, 7), 4, n=3),))

    def plan(engine: str, args: dict[str, object]) -> dict[str, Any]:
        target = TargetInfo(engine, "http://127.0.0.1:1", server_args=args)
        return replay_plan(dataclasses.replace(seed_like(), scenario=sc, target=target))

    vllm = plan("vllm", {"model": "tiny"})
    assert (vllm["path"], vllm["flush"], vllm["dialect"]) == ("/v1/completions", "vllm", "openai")
    req = vllm["requests"][0]
    assert req["copies"] == 3 and req["body"]["n"] == 1 and req["body"]["model"] == "tiny"  # vLLM: 3 x n=1
    llama = plan("llamacpp", {"cache_prompt": False})["requests"][0]
    assert llama["body"]["cache_prompt"] is False and llama["body"]["n_cmpl"] == 3 and llama["copies"] == 1
    openai = plan("openai", {})
    assert openai["flush"] is None and openai["requests"][0]["body"]["model"] is None  # asked at run time

    # A seeded sampled request keeps its temperature and seed, and vLLM gets its n whole (it
    # forks n children seeded seed + i, as `servefuzz replay` sends it).
    sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6, 7), 4, n=3, temperature=0.8, seed=77),))
    req = plan("vllm", {"model": "tiny"})["requests"][0]
    assert req["copies"] == 1 and (req["body"]["n"], req["body"]["temperature"], req["body"]["seed"]) == (3, 0.8, 77)
    sp = plan("reference", {})["requests"][0]["body"]["sampling_params"]
    assert (sp["temperature"], sp["sampling_seed"]) == (0.8, 77)

    # A request under a LoRA adapter names it as each dialect does: vLLM's model (which the
    # script's --model must not replace, hence the entry's "adapter"), SGLang's lora_path.
    sc = Scenario(1, (RequestSpec("r01", 0.0, (5, 6, 7), 4, adapter="lora-a"), RequestSpec("r02", 0.0, (5, 6, 8), 4)))
    under, base = plan("vllm", {"model": "tiny"})["requests"]
    assert (under["body"]["model"], under["adapter"], base["body"]["model"]) == ("lora-a", "lora-a", "tiny") and "adapter" not in base
    under, base = plan("reference", {})["requests"]
    assert under["body"]["lora_path"] == "lora-a" and "lora_path" not in base["body"]


SGLANG_RECORDED = Path(__file__).parent.parent / "targets" / "data" / "sglang"


def _repro_parse(tmp_path: Path, finding: Finding, engine: str = "sglang") -> Any:
    """The rendered repro_full.py's own `parse`, for a finding made on `engine` (SGLang unless named)."""
    import importlib.util

    made = dataclasses.replace(finding, target=dataclasses.replace(finding.target, engine=engine))
    path = tmp_path / f"repro_{engine}.py"
    path.write_text(repro_script(made), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"repro_{engine}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chunks(name: str) -> list[Any]:
    lines = (SGLANG_RECORDED / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip() != "[DONE]"]


def test_repro_reads_every_sglang_stream_shape_as_the_whole_answer(tmp_path: Path, finding: Finding) -> None:
    repro = _repro_parse(tmp_path, finding)
    whole = json.loads((SGLANG_RECORDED / "generate.json").read_text(encoding="utf-8"))
    expected = {0: (tuple(whole["output_ids"]), whole["text"])}
    assert repro.FINDING["dialect"] == "sglang"
    for name in ("generate_stream.txt", "generate_stream_incremental.txt", "generate_stream_legacy.txt"):
        assert repro.parse(_chunks(name)) == expected, name
    with pytest.raises(repro.InBandError, match="aborted"):
        repro.parse(_chunks("generate_stream_abort.txt"))


def test_repro_reads_a_llamacpp_stream_with_prefill_progress_as_its_tokens_alone(tmp_path: Path, finding: Finding) -> None:
    # A cut stream asks llama-server for prefill progress (`targets.llamacpp`); each progress
    # chunk carries a placeholder token 0 (recorded from 0c1e570), which is no token of the answer.
    repro = _repro_parse(tmp_path, finding, "llamacpp")
    progress = {"index": 0, "content": "", "tokens": [0], "stop": False, "tokens_predicted": 0,
                "prompt_progress": {"total": 300, "cache": 0, "processed": 64, "time_ms": 29}}
    token = {"index": 0, "content": "x", "tokens": [807], "stop": False, "tokens_predicted": 1}
    end = {"index": 0, "content": "", "tokens": [], "stop": True, "tokens_predicted": 1}
    assert repro.FINDING["dialect"] == "llamacpp"
    assert repro.parse([progress, progress, token, end]) == repro.parse([token, end])
    # Control: the same chunk without its progress is a token (what the skip keeps out).
    plain = {k: v for k, v in progress.items() if k != "prompt_progress"}
    assert repro.parse([plain, token, end]) != repro.parse([token, end])


def test_repro_cuts_a_llamacpp_stream_where_its_prefill_progress_reaches_the_cut(tmp_path: Path, finding: Finding) -> None:
    # As the adapter does (`targets.base.cut_in_prefill`): a llama-server stream with
    # `cancel_at_prefill` is cut at the first progress chunk that reaches it, not on the clock;
    # a dialect without progress reports keeps the clock's cut.
    cut = RequestSpec("v", 0.0, (5,) * 300, 8, stream=True, cancel_after_ms=40.0, cancel_at_prefill=128)
    sc = Scenario(1, (cut,))

    def entry(engine: str) -> dict[str, Any]:
        target = TargetInfo(engine, "http://127.0.0.1:1", server_args={"model": "tiny"})
        return replay_plan(dataclasses.replace(seed_like(), scenario=sc, target=target))["requests"][0]

    assert entry("llamacpp")["cancel_at_prefill"] == 128 and entry("llamacpp")["body"]["return_progress"] is True
    assert "cancel_at_prefill" not in entry("vllm") and entry("vllm")["cancel_after_ms"] == 40.0
    repro = _repro_parse(tmp_path, finding, "llamacpp")

    def progress(n: int) -> bytes:
        chunk = {"index": 0, "content": "", "tokens": [0], "prompt_progress": {"total": 300, "cache": 0, "processed": n}}
        return b"data: " + json.dumps(chunk).encode() + b"\n"

    stream = [progress(0), progress(64), progress(128), progress(192), b'data: {"index": 0, "tokens": [7]}\n']
    request = object.__new__(repro.Exchange)
    request.req, request.cut = entry("llamacpp"), repro.threading.Event()
    request.conn = type("Conn", (), {"sock": None})()
    read = repro.stream_chunks(iter(stream), request.prefill_cut)
    assert len(read) == 3 and request.cut.is_set()  # cut at 128, nothing read after it
    # Control: without cancel_at_prefill the whole stream is read and nothing is cut.
    request.req, request.cut = {**entry("llamacpp"), "cancel_at_prefill": None}, repro.threading.Event()
    assert len(repro.stream_chunks(iter(stream), request.prefill_cut)) == 5 and not request.cut.is_set()


def test_the_script_decides_with_servefuzz_stats_verbatim(script: Path) -> None:
    # repro_full.py keeps a standard-library copy of the rule that turns k of n into a decision:
    # servefuzz.stats itself, embedded whole, so the two cannot disagree.
    import inspect

    from servefuzz import stats

    assert inspect.getsource(stats) in script.read_text(encoding="utf-8")


def test_an_isolation_breachs_script_looks_for_the_cached_count_and_finds_it_only_where_salts_leak(tmp_path: Path) -> None:
    """The SGLang finding's own repro_full.py (docs/findings/sglang-cpu-salt-dropped), SGLang's
    /generate dialect, against the reference engine, which speaks it: with the planted fault that
    models sglang#23300 (salt-ignored) it confirms, on a clean one it does not; both say what they
    looked for, a cached-token count, not a divergence."""
    found = load_finding(Path(__file__).parents[2] / "docs/findings/sglang-cpu-salt-dropped/finding_min_triaged.json")
    path = tmp_path / "repro_full.py"
    path.write_text(repro_script(found), encoding="utf-8")
    with ServerProcess.reference(["--fault", "salt-ignored"]) as leaky:
        p = run_script(path, "--base-url", leaky.base_url, "--runs", "4")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "  Expect   : ['r06_st_sp'] to report cached tokens its own cache salt does not allow" in p.stdout
    assert "RESULT: CONFIRMED  (in 4/4 replays; 1/1 expected breaches reproduced)" in p.stdout, p.stdout
    with ServerProcess.reference([]) as clean:
        p = run_script(path, "--base-url", clean.base_url, "--runs", "8")  # 8 clean runs decide it
    assert p.returncode == 1, p.stdout + p.stderr
    assert "RESULT: NOT REPRODUCED  (in 0/8 replays; 0/1 expected breaches reproduced)" in p.stdout, p.stdout


FAKE_SERVER = '''
import json, os, sys, threading, traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.reply({"data": [{"id": "tiny"}]} if self.path == "/v1/models" else {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.startswith("/reset_prefix_cache"):
            return self.reply({"success": True})
        if body.get("seed") is not None and sys.argv[2:] == ["500"]:  # vLLM's way: 500s, then gone
            try:
                raise RuntimeError("CPU Generator does not use offset")
            except RuntimeError:
                traceback.print_exc()
            sys.stderr.flush()
            threading.Timer(1.0, os._exit, (3,)).start()
            data = b'{"error": {"message": "EngineCore encountered an issue"}}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if body.get("seed") is not None:  # the planted crash: a seeded request kills the engine
            try:
                raise RuntimeError("CPU Generator does not use offset")
            except RuntimeError:
                traceback.print_exc()
            sys.stderr.flush()
            os._exit(3)
        self.reply({"choices": [{"index": 0, "text": " a", "token_ids": [5]}]})

print("fake engine up", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
'''


@pytest.mark.parametrize("how", ["reset", "500"])
def test_serve_starts_the_users_server_restarts_it_after_a_crash_and_prints_its_traceback(tmp_path: Path, how: str) -> None:
    """A crash finding's repro_full.py with `--serve COMMAND` (the user's command; the finding names
    none): the server it starts dies in every run, is started again for the next, and the
    report ends with the traceback of its log, whole. A server that answers its requests with
    500s and then dies (vLLM's engine core) is a crash too."""
    found = load_finding(Path(__file__).parents[2] / "docs/findings/vllm-cpu-seed-chunked-crash/finding.json")
    path = tmp_path / "repro_full.py"
    path.write_text(repro_script(found), encoding="utf-8")
    fake = tmp_path / "fake_engine.py"
    fake.write_text(FAKE_SERVER, encoding="utf-8")
    port = free_port()
    log = tmp_path / "server.log"
    p = run_script(path, "--serve", f"{sys.executable} {fake} {port}" + (" 500" if how == "500" else ""), "--serve-log", str(log),
                   "--base-url", f"http://127.0.0.1:{port}", "--runs", "2", "--start-timeout", "30")
    assert "actual (with the other 6 requests): the server died in 2/2 runs" in p.stdout, p.stdout + p.stderr
    assert "RESULT: " in p.stdout and "(in 2/2 replays; crash seen again)" in p.stdout
    tail = p.stdout.split("The server (--serve) died 2 times in 2 runs; the last time with exit status 3")[1]
    assert "Traceback (most recent call last):" in tail and "RuntimeError: CPU Generator does not use offset" in tail
    assert log.read_text(encoding="utf-8").count("=== repro_full.py --serve: ") == 2
    # A server that cannot start is one line, exit 2.
    p = run_script(path, "--serve", f"{sys.executable} -c 'raise SystemExit(9)'", "--serve-log", str(log),
                   "--base-url", f"http://127.0.0.1:{free_port()}", "--runs", "1")
    assert p.returncode == 2 and "exited with status 9 before it answered" in p.stderr, p.stderr
