"""The GPU presets (`vllm-gpu`, `sglang-gpu`): what gpu_run.sh unpacks is where the presets look,
the commands are the engines' GPU defaults, their controls and triage rows exist on a GPU, and
the bundles' pins agree with engines.GPU_VERSIONS. The engines themselves run only on the lent
H200 (docs/gpu/); here the commands are built, not started."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from servefuzz import engine_files, engines
from servefuzz.engines.request import LaunchRequest
from servefuzz.engines.spec import Feature
from servefuzz.errors import UsageError
from servefuzz.launcher import Launch
from servefuzz.servers import deterministic_launch
from servefuzz.triager import matrix_of

ROOT = Path(__file__).resolve().parents[1]
LOCKS = ROOT / "scripts" / "gpu-engines"


def _unpack(cache: Path, preset: str, version: str, config: str = "{}") -> Path:
    """What scripts/gpu_run.sh's unpack_engines leaves (site/, the interpreter, the marker), and
    a model folder beside it whose config.json is `config`; returns the model folder."""
    where = cache / f"{preset}-{version}"
    (where / "site").mkdir(parents=True)
    (where / "python").write_text("/usr/bin/python3\n")
    (where / ".complete").touch()
    model = cache / "hf"
    model.mkdir()
    (model / "config.json").write_text(config)
    return model


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SERVEFUZZ_CACHE", str(tmp_path))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path


def test_a_preset_not_unpacked_is_one_line(cache: Path) -> None:
    for preset in engines.GPU_VERSIONS:
        version = engines.PRESET_VERSIONS[preset].default
        with pytest.raises(UsageError, match=rf"{preset} {version} is not installed under .*: run `servefuzz engines "
                                             rf"install {preset}@{version}` .*--engine-python PATH.*scripts/gpu_run.sh"):
            Launch.resolve(preset)  # said before any model is looked for or built
    with pytest.raises(UsageError, match=r"vllm-gpu@0.1: not a version servefuzz knows \(it knows 0.26.0, 0.27.0"):
        LaunchRequest.parse("vllm-gpu@0.1")
    request = LaunchRequest.parse("sglang-gpu@0.5.17")
    assert (request.preset, request.version) == ("sglang-gpu", "0.5.17")


def test_vllm_gpu_serves_the_gpu_defaults_from_the_bundle(cache: Path) -> None:
    model = _unpack(cache, "vllm-gpu", "0.26.0")
    launch = Launch.resolve("vllm-gpu", model=model)
    argv = list(launch.argv)
    assert (launch.engine, launch.device, argv[0]) == ("vllm", "cuda", "/usr/bin/python3")
    assert argv[argv.index("--dtype") + 1] == "bfloat16"  # what users serve, whatever the model declares
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "{port}"
    assert "--enforce-eager" not in argv  # CUDA graphs and torch.compile stay on
    assert {"--enable-prefix-caching", "--enable-prompt-tokens-details"} <= set(argv)
    # The bundle on the server's path only, first; FlashInfer's sampler is not in it.
    assert launch.env["PYTHONPATH"] == str(cache / "vllm-gpu-0.26.0" / "site")
    assert launch.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and launch.env["VLLM_HOST_IP"] == "127.0.0.1"
    # Its control exists on a GPU (batch-invariant kernels), and so do the GPU-only rows.
    det = deterministic_launch(launch)
    assert det is not None and det.env["VLLM_BATCH_INVARIANT"] == "1"
    f32 = Launch.resolve("vllm-gpu", model=model, profile="float32")
    assert f32.argv[f32.argv.index("--dtype") + 1] == "float32" and list(f32.argv).count("--dtype") == 1
    rows = [r.name for r in matrix_of(f32)]
    assert rows[0] == "no profile float32" and "--enforce-eager" in rows
    # The deterministic control as a campaign: the profile sets the variable, and only on the
    # server's environment; the command line stays the default's.
    inv = Launch.resolve("vllm-gpu", model=model, profile="batch-invariant")
    assert inv.env["VLLM_BATCH_INVARIANT"] == "1" and inv.argv == launch.argv
    assert "VLLM_BATCH_INVARIANT" not in launch.env and inv.env["PYTHONPATH"] == launch.env["PYTHONPATH"]


def test_sglang_gpu_serves_bfloat16_with_triton_attention(cache: Path) -> None:
    model = _unpack(cache, "sglang-gpu", "0.5.17", '{"dtype": "float32"}')
    launch = Launch.resolve("sglang-gpu", model=model, profile="page-64")
    argv = list(launch.argv)
    assert (launch.engine, launch.device) == ("sglang", "cuda")
    assert argv[argv.index("--dtype") + 1] == "bfloat16"  # float32 fails sgl-kernel's CUDA rmsnorm
    assert argv[argv.index("--attention-backend") + 1] == "triton"
    assert argv[argv.index("--page-size") + 1] == "64" and argv.count("--page-size") == 1
    assert "--device" not in argv and "SGLANG_USE_CPU_ENGINE" not in launch.env
    det = deterministic_launch(launch)
    assert det is not None and "--enable-deterministic-inference" in det.argv  # refused on CPU, runs here
    rows = [r.name for r in matrix_of(launch)]
    assert {"--enable-deterministic-inference", "--attention-backend triton", "--page-size 16"} <= set(rows)
    # The pool is capped, so that servers started side by side cannot starve one another's
    # memory profile (the cap decides, not --mem-fraction-static).
    assert argv[argv.index("--max-total-tokens") + 1] == str(1 << 18)
    assert float(argv[argv.index("--mem-fraction-static") + 1]) >= 0.5
    det_profile = Launch.resolve("sglang-gpu", model=model, profile="deterministic")
    assert list(det_profile.argv).count("--enable-deterministic-inference") == 1


def test_the_bundles_pins_follow_engines() -> None:
    """Every GPU version servefuzz offers has a lock file, and every line of it is pinned by hash:
    `pip download --require-hashes` then refuses a wheel that changed."""
    locks = {p.stem for p in LOCKS.glob("*.txt")}
    offered = {f"{preset.removesuffix('-gpu')}-{v}" for preset, vs in engines.GPU_VERSIONS.items() for v in vs}
    assert locks == offered
    for lock in LOCKS.glob("*.txt"):
        lines = [line for line in lock.read_text().splitlines() if line and not line.startswith("#")]
        name = lock.stem.rsplit("-", 1)[0]
        assert any(line.startswith(f"{name}==") for line in lines), f"{lock.name} does not pin {name} itself"
        for line in lines:
            assert re.fullmatch(r"[a-z0-9.-]+==[0-9A-Za-z.+]+ --hash=sha256:[0-9a-f]{64}", line), line


def test_an_engine_the_bundler_does_not_know_is_one_line() -> None:
    done = subprocess.run([str(ROOT / "scripts" / "gpu_bundle.sh"), "vllm@9.9.9"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "SERVEFUZZ_CACHE": "/nonexistent"},
                          timeout=120)
    assert done.returncode == 1
    assert "error: unknown engine vllm@9.9.9 (known: sglang@0.5.17 vllm@0.26.0" in done.stderr


def test_sglang_gpu_fa3_profiles_swap_the_attention_backend(cache: Path) -> None:
    """FA3 (SGLang's choice on Hopper) replaces the preset's Triton, once; the deterministic mode
    is a profile of each backend; triage can take each back to Triton and to the preset."""
    model = _unpack(cache, "sglang-gpu", "0.5.17")
    triton = list(Launch.resolve("sglang-gpu", model=model).argv)
    for name, deterministic in (("fa3", False), ("fa3-deterministic", True)):
        argv = list(Launch.resolve("sglang-gpu", model=model, profile=name).argv)
        assert argv.count("--attention-backend") == 1 and argv[argv.index("--attention-backend") + 1] == "fa3"
        assert ("--enable-deterministic-inference" in argv) is deterministic
        assert sorted(w for w in argv if w not in ("fa3", "--enable-deterministic-inference")) == \
            sorted(w for w in triton if w != "triton")  # nothing else changes
        rows = [r.name for r in matrix_of(Launch.resolve("sglang-gpu", model=model, profile=name))]
        assert rows[0] == f"no profile {name}" and {"--attention-backend triton", "--disable-radix-cache"} <= set(rows)
        assert "sglang@0.5.17+fa3" in engine_files.profile("sglang-gpu", name).needs
    det = list(Launch.resolve("sglang-gpu", model=model, profile="deterministic").argv)
    assert det[det.index("--attention-backend") + 1] == "triton"  # the Triton profile stays as it was


def test_sglang_gpu_flashinfer_profiles_swap_the_attention_backend_and_never_compile(cache: Path) -> None:
    """FlashInfer replaces the preset's Triton, once, as FA3 does; its servers never JIT-compile
    (a module missing from the prebuilt pack is an error, not a 4-minute build); triage can take
    each back to Triton and to the preset."""
    model = _unpack(cache, "sglang-gpu", "0.5.17")
    plain = Launch.resolve("sglang-gpu", model=model)
    triton = list(plain.argv)
    assert "FLASHINFER_DISABLE_JIT" not in plain.env  # only the FlashInfer profiles refuse to compile
    for name, deterministic in (("flashinfer", False), ("flashinfer-deterministic", True)):
        launch = Launch.resolve("sglang-gpu", model=model, profile=name)
        argv = list(launch.argv)
        assert argv.count("--attention-backend") == 1 and argv[argv.index("--attention-backend") + 1] == "flashinfer"
        assert ("--enable-deterministic-inference" in argv) is deterministic
        assert sorted(w for w in argv if w not in ("flashinfer", "--enable-deterministic-inference")) == \
            sorted(w for w in triton if w != "triton")  # nothing else changes
        assert launch.env.get("FLASHINFER_DISABLE_JIT") == "1"
        rows = [r.name for r in matrix_of(launch)]
        assert rows[0] == f"no profile {name}" and "--attention-backend triton" in rows
        assert "gpu-flashinfer.sha256" in engine_files.profile("sglang-gpu", name).needs


def test_a_variant_the_bundler_does_not_know_is_one_line() -> None:
    done = subprocess.run([str(ROOT / "scripts" / "gpu_bundle.sh"), "sglang@0.5.17+fa4"], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "SERVEFUZZ_CACHE": "/nonexistent"},
                          timeout=120)
    assert done.returncode == 1
    assert "error: unknown variant in sglang@0.5.17+fa4 (known: sglang@VERSION+fa3)" in done.stderr


@pytest.mark.parametrize(("preset", "version", "name", "flag", "value"), [
    ("sglang-gpu", "0.5.17", "fp8-kv", "--kv-cache-dtype", "fp8_e4m3"),
    ("sglang-gpu", "0.5.17", "spec-ngram", "--speculative-algorithm", "NGRAM"),
    ("sglang-gpu", "0.5.17", "spec-mtp", "--speculative-algorithm", "EAGLE"),
    ("sglang-gpu", "0.5.17", "hicache", "--hicache-ratio", "2"),
    ("sglang-gpu", "0.5.17", "hybrid", "--max-mamba-cache-size", "256"),
    ("sglang-gpu", "0.5.17", "hybrid-fa3", "--max-mamba-cache-size", "256"),
    ("sglang-gpu", "0.5.17", "tiny-pool", "--max-running-requests", "32"),
    ("vllm-gpu", "0.26.0", "fp8-kv", "--kv-cache-dtype", "fp8"),
    ("vllm-gpu", "0.26.0", "spec-ngram", "--speculative-config", None),
    ("vllm-gpu", "0.26.0", "spec-mtp", "--speculative-config", None),
    ("vllm-gpu", "0.26.0", "gdn", "--gdn-prefill-backend", "triton"),
    ("vllm-gpu", "0.26.0", "offload", "--kv-offloading-size", "1"),
    ("vllm-gpu", "0.26.0", "preemption", "--num-gpu-blocks-override", "48"),
])
def test_the_gpu_feature_profiles_add_their_flag_once_and_triage_can_drop_them(
        cache: Path, preset: str, version: str, name: str, flag: str, value: str | None) -> None:
    model = _unpack(cache, preset, version)
    plain = list(Launch.resolve(preset, model=model).argv)
    argv = list(Launch.resolve(preset, model=model, profile=name).argv)
    assert flag not in plain and argv.count(flag) == 1
    if value is not None:
        assert argv[argv.index(flag) + 1] == value
    else:  # a JSON config vLLM parses itself
        assert json.loads(argv[argv.index(flag) + 1])["method"] in ("ngram_gpu", "mtp")
    for word in ("--max-total-tokens", "--page-size", "--dtype", "--max-model-len"):  # replaced, never doubled
        assert argv.count(word) == plain.count(word)
    rows = [r.name for r in matrix_of(Launch.resolve(preset, model=model, profile=name))]
    assert rows[0] == f"no profile {name}"


def test_the_hicache_profile_shrinks_the_device_pool_so_pages_go_to_host_memory(cache: Path) -> None:
    model = _unpack(cache, "sglang-gpu", "0.5.17")
    argv = list(Launch.resolve("sglang-gpu", model=model, profile="hicache").argv)
    assert argv[argv.index("--max-total-tokens") + 1] == "4096" and argv[argv.index("--page-size") + 1] == "16"
    assert "--enable-hierarchical-cache" in argv
    assert Feature.HOST_CACHE in engine_files.profile("sglang-gpu", "hicache").features


def _unpack_flashinfer(work: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """gpu_run.sh's own unpack_flashinfer (and its say/die), run alone in `work`: the file the
    script reads from its root (.gpu/, scripts/gpu-flashinfer.sha256) are made there."""
    script = (ROOT / "scripts" / "gpu_run.sh").read_text()
    functions = "\n".join(m.group(0) for m in re.finditer(
        r"^(say|die)\(\) \{.*?\}$|^unpack_flashinfer\(\) \{\n.*?^\}$", script, re.M | re.S))
    assert "unpack_flashinfer()" in functions and "die()" in functions
    return subprocess.run(["bash", "-c", f"set -euo pipefail\n{functions}\nunpack_flashinfer"], cwd=work,
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "SERVEFUZZ_CACHE": str(cache)})


def test_the_flashinfer_pack_is_unpacked_only_with_the_pinned_sha256(tmp_path: Path) -> None:
    """The control both ways: the pinned pack lands in FlashInfer's AOT folder as NAME/NAME.so;
    a pack of another sha256 is refused in one line, and nothing is unpacked."""
    work, cache = tmp_path / "repo", tmp_path / "cache"
    site = cache / "sglang-gpu-0.5.17" / "site"
    (site / "flashinfer_python-0.6.15.post1.dist-info").mkdir(parents=True)
    modules = tmp_path / "modules" / "norm"
    modules.mkdir(parents=True)
    (modules / "norm.so").write_bytes(b"\x7fELF not really")
    (work / ".gpu").mkdir(parents=True)
    (work / "scripts").mkdir()
    pack = work / ".gpu" / "flashinfer-jit-0.6.15.post1-90a.tar.xz"
    subprocess.run(["tar", "-C", str(modules.parent), "-cJf", str(pack), "norm/norm.so"], check=True, timeout=60)
    digest = subprocess.run(["sha256sum", str(pack)], capture_output=True, text=True, check=True).stdout.split()[0]
    pin = work / "scripts" / "gpu-flashinfer.sha256"

    pin.write_text(f"# a comment\n{'0' * 64}  {pack.name}\n")
    refused = _unpack_flashinfer(work, cache)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert f"has sha256 {digest}; scripts/gpu-flashinfer.sha256 pins {'0' * 64}" in refused.stderr
    assert not (site / "flashinfer" / "data" / "aot").exists()

    pin.write_text(f"# a comment\n{digest}  {pack.name}\n")
    done = _unpack_flashinfer(work, cache)
    assert done.returncode == 0, done.stderr
    assert (site / "flashinfer" / "data" / "aot" / "norm" / "norm.so").read_bytes() == b"\x7fELF not really"


def test_sglang_gpu_prefills_in_chunks_under_the_tiny_models_context_and_triage_turns_that_off(cache: Path) -> None:
    # SGLang's own chunk on an 80 GB card (8,192) is over the tiny models' whole context: no
    # prompt could be split. The preset's 512 is under it, and the triage row drops it to -1.
    model = _unpack(cache, "sglang-gpu", "0.5.17")
    launch = Launch.resolve("sglang-gpu", model=model)
    argv = list(launch.argv)
    assert argv.count("--chunked-prefill-size") == 1
    assert int(argv[argv.index("--chunked-prefill-size") + 1]) < 2048
    row = next(r for r in matrix_of(launch) if "chunked" in r.name).apply_argv(argv)
    assert row.count("--chunked-prefill-size") == 1 and row[row.index("--chunked-prefill-size") + 1] == "-1"


_IDS = {"<s>": 0, "</s>": 1, "<pad>": 2}


def _tiny(arch: str, dtype: str = "float32", **changed: object) -> str:
    """The config.json `servefuzz model build --arch ARCH` writes (`changed` keys replaced, a None
    one dropped): what `gpu_refusal` reads, without the weights no one reads before a start."""
    module = importlib.import_module(f"servefuzz.models.{arch.replace('-', '_')}")
    config = {**module.config(2048, _IDS, dtype), **changed}
    return json.dumps({k: v for k, v in config.items() if v is not None})


# Each start that failed on the H200 (docs/gpu/nondense-and-features.md, "What failed to start"),
# as SGLang 0.5.17's code says it fails: (arch, dtype, changed keys, profile, the words of the line).
_REFUSED = [
    ("deepseek-v3", "float32", {}, "spec-mtp", "fused_eh_norm.py:19"),
    ("gpt-oss", "float32", {}, None, "gpt_oss.py:253"),
    ("nemotron-h", "float32", {}, "hybrid", "server_args.py:5503"),
    ("nemotron-h", "float32", {"mamba_n_groups": None}, "hybrid-fa3", "mamba_n_groups (8, its default"),
]
# The same architectures in the forms it starts: the speculative build's 512-wide DeepSeek-V3
# under MTP, the 256-wide one without it, GPT-OSS from a bfloat16 checkpoint, NemotronH on FA3.
_TAKEN = [
    ("deepseek-v3", "float32", {"hidden_size": 512}, "spec-mtp"),
    ("deepseek-v3", "float32", {}, None),
    ("gpt-oss", "bfloat16", {}, None),
    ("nemotron-h", "float32", {}, "hybrid-fa3"),
]


@pytest.mark.parametrize(("arch", "dtype", "changed", "profile", "says"), _REFUSED)
def test_sglang_gpu_refuses_what_sglang_will_not_start_in_one_line(
        cache: Path, arch: str, dtype: str, changed: dict[str, object], profile: str | None, says: str) -> None:
    model = _unpack(cache, "sglang-gpu", "0.5.17", _tiny(arch, dtype, **changed))
    with pytest.raises(UsageError, match="sglang-gpu 0.5.17 will not serve") as refused:
        Launch.resolve("sglang-gpu", model=model, profile=profile)
    assert says in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(("arch", "dtype", "changed", "profile"), _TAKEN)
def test_sglang_gpu_starts_the_forms_sglang_takes(
        cache: Path, arch: str, dtype: str, changed: dict[str, object], profile: str | None) -> None:
    model = _unpack(cache, "sglang-gpu", "0.5.17", _tiny(arch, dtype, **changed))
    assert str(model) in Launch.resolve("sglang-gpu", model=model, profile=profile).argv


def test_sglang_gpu_builds_gpt_oss_in_bfloat16_and_the_others_as_every_preset_does() -> None:
    assert engines.PRESETS["sglang-gpu"].arch_dtypes == {"gpt-oss": "bfloat16"}
    assert "gpt-oss" not in engines.PRESETS["vllm-gpu"].arch_dtypes


def test_a_refused_sglang_gpu_model_is_one_line_and_exit_2(cache: Path) -> None:
    """Through the command line, with servefuzz's own tiny NemotronH (built into the test's cache)
    on the Triton attention of the `hybrid` profile."""
    _unpack(cache, "sglang-gpu", "0.5.17")
    done = subprocess.run([sys.executable, "-m", "servefuzz", "fuzz", "--launch", "sglang-gpu", "--profile", "hybrid",
                           "--model-arch", "nemotron-h", "--time", "1", "--out", str(cache / "c")],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # this tree's servefuzz
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("servefuzz: error: sglang-gpu 0.5.17 will not serve ") and "triton" in lines[0]


def test_vllm_gpu_steps_under_the_tiny_models_context_and_the_no_chunking_row_drops_that_budget(cache: Path) -> None:
    # vLLM's own step budget on an H100/H200 (8,192) is over the tiny models' max_model_len: no
    # prompt could be split. With chunked prefill off vLLM refuses a budget under max_model_len,
    # so triage's row must take the budget away with it.
    model = _unpack(cache, "vllm-gpu", "0.26.0")
    launch = Launch.resolve("vllm-gpu", model=model)
    argv = list(launch.argv)
    budget = int(argv[argv.index("--max-num-batched-tokens") + 1])
    assert budget < int(argv[argv.index("--max-model-len") + 1]) and budget >= 1024  # vLLM's default max_num_seqs there
    row = next(r for r in matrix_of(launch) if r.name == "--no-enable-chunked-prefill").apply_argv(argv)
    assert "--max-num-batched-tokens" not in row and "--no-enable-chunked-prefill" in row
