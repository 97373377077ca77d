"""Where the engines and the models they serve are on this machine: the install folders
`scripts/setup_engines.sh` (and `servefuzz engines install`) fill (`cache_dir`, `engine_dir`,
`installed`, `program`), what an engine's `--help` says (`help_of`), the folders servefuzz puts on
an engine's PYTHONPATH (`standin_path`, `tracer_path`), the tiny models, adapters and draft the
presets serve (built into the cache on first use), a `--model`'s file in the engine's format, and
a preset's profile with the files its flags name (`profile`).

The I/O half of the engines: `engines/` is the specs and the tables read from them, pure; this
module reads the disk and builds into the cache by those tables. A preset's command line is an
argv template with `{port}` left for `ServerProcess` to fill; `presets.plan` builds it from the
engine's own module with the program found here:

    >>> from servefuzz.engines.llamacpp import server_argv
    >>> argv = server_argv(program("llama-server", "b11434"), Path("models/tiny.gguf"), slots=4)
    >>> argv[0].endswith("llama.cpp-b11434/llama-server"), argv[argv.index("-np") + 1]
    (True, '4')

Nothing here names an engine: each preset's install folder, program and model format are its spec's.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from servefuzz.engines import PRESET_VERSIONS, PRESETS, PROFILES, Profile, preset_spec, version_of
from servefuzz.errors import UsageError

if TYPE_CHECKING:
    from servefuzz.models import AdapterPaths

__all__ = [
    "GGUF_CONVERTER_ENV",
    "SETUP_SCRIPT",
    "adapter_flags",
    "adapters_for",
    "arch_models",
    "built_truth",
    "cache_dir",
    "default_draft",
    "default_models",
    "draft_for",
    "engine_dir",
    "gguf_converter",
    "gguf_model",
    "help_of",
    "hf_model_dir",
    "installed",
    "model_config",
    "model_dtype",
    "profile",
    "program",
    "served_model",
    "standin_path",
    "tracer_path",
]

SETUP_SCRIPT = "scripts/setup_engines.sh"


def cache_dir() -> Path:
    """`$SERVEFUZZ_CACHE`, else `~/.cache/servefuzz`: where the setup script installs."""
    return Path(os.environ.get("SERVEFUZZ_CACHE") or Path.home() / ".cache" / "servefuzz")


def engine_dir(preset: str, version: str) -> Path:
    """Where `preset` at `version` is installed: `cache_dir()/<cache>-<version>` (the setup
    script's folders, `servefuzz engines install`'s and scripts/gpu_run.sh's too), finished once
    its `.complete` is there."""
    return cache_dir() / f"{PRESET_VERSIONS[preset].cache}-{version}"


def installed(preset: str, version: str | None = None) -> bool:
    """Whether `preset` at `version` (None: its default) was installed to the end (its marker
    file is there)."""
    return (engine_dir(preset, version_of(preset, version)) / ".complete").is_file()


def program(preset: str, version: str | None = None) -> str:
    """The program that runs `preset` at `version` (None: its default): the interpreter of its
    venv or its binary, in its install folder; on the GPU machine, the interpreter the file
    the preset names there says (scripts/gpu_run.sh writes it)."""
    chosen = PRESETS[preset]
    folder = engine_dir(preset, version_of(preset, version))
    if chosen.program_named_by:
        return (folder / chosen.program_named_by).read_text(encoding="utf-8").strip()
    return str(folder / chosen.program)


# llama.cpp's own HF -> GGUF converter, for `servefuzz model build --arch`: scripts/setup_engines.sh
# keeps it (with the gguf-py and conversion/ it imports) in `convert/` beside llama-server; this
# variable names another `convert_hf_to_gguf.py`.
GGUF_CONVERTER_ENV = "SERVEFUZZ_GGUF_CONVERTER"


def gguf_converter() -> Path | None:
    """llama.cpp's `convert_hf_to_gguf.py` of the default llama-server build ($SERVEFUZZ_GGUF_CONVERTER
    first), or None where there is none."""
    named = os.environ.get(GGUF_CONVERTER_ENV)
    if named:
        return Path(named)
    kept = Path(program("llama-server")).parent / "convert" / "convert_hf_to_gguf.py"
    return kept if kept.is_file() else None


def standin_path() -> Path:
    """The folder holding servefuzz's stand-in `sgl_kernel` package (and its check): put on the
    PYTHONPATH of SGLang's processes only, never of servefuzz's own."""
    return Path(__file__).resolve().parent / "standins"


def tracer_path() -> Path:
    """The folder holding servefuzz's engine-coverage tracer (`servefuzz_tracer`, and a
    `sitecustomize` that starts it): put on the PYTHONPATH of a launched engine's processes when
    servefuzz traces its coverage, never of servefuzz's own."""
    return standin_path() / "coverage"


def help_of(command: tuple[str, ...], env: tuple[tuple[str, str], ...] = ()) -> str:
    """What `command --help` prints, stdout and stderr, run with `env` on top of servefuzz's
    own environment (the server's: SGLang's CPU engine reads its variables at import); empty
    when it cannot run or takes past 300 s (vLLM's imports torch: 20 s on a busy 2-core box).
    Read once a process for each command and path, however many launches (triage's rows) ask."""
    return _help(command, env, os.environ.get("PYTHONPATH", ""))


@functools.cache
def _help(command: tuple[str, ...], env: tuple[tuple[str, str], ...], pythonpath: str) -> str:
    try:
        done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=300, check=False,
                              stdin=subprocess.DEVNULL, env={**os.environ, **dict(env)})
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout + done.stderr


# -- feature profiles of the presets ---------------------------------------------------------


def profile(preset: str, name: str, *, model: Path | None = None) -> Profile:
    """The profile `name` of `preset`; UsageError (one line) for a name that is not there.

    `model`: the `--model` the preset serves, for a profile whose flags name files that must
    match it (the adapters: `adapters_for`; the draft model: `draft_for`); None for the default
    models.

    >>> profile("llama-server", "context-shift").flags
    ('-c', '2048', '--context-shift')
    """
    named = PROFILES.get(preset)
    if named is None:
        raise UsageError(f"--profile needs --launch with a preset that has profiles ({', '.join(PROFILES)})")
    if name not in named:
        raise UsageError(f"--profile {name[:64]!r} is not a profile of {preset} (its profiles: {', '.join(named)})")
    chosen = named[name]
    if chosen.adapters:
        return dataclasses.replace(chosen, flags=chosen.flags + adapter_flags(preset, adapters_for(preset, model)))
    if chosen.draft:
        return dataclasses.replace(chosen, flags=chosen.flags + (PRESETS[preset].draft_flag, str(draft_for(model))))
    return chosen


def _format(preset: str) -> str:
    spec = preset_spec(preset)
    return spec.model_format if spec is not None else ""


def _adapter_files(paths: AdapterPaths, model_format: str) -> tuple[Path, ...]:
    return paths.gguf if model_format == "gguf" else paths.hf


def adapter_flags(preset: str, root: Path | None = None) -> tuple[str, ...]:
    """The flags that load servefuzz's tiny adapters into `preset` (its `adapter_flags`, given
    each adapter's name and file in the engine's model format): those under `root` (a
    `servefuzz model build` DIR/lora; nothing is built, as a report shows them), else the
    default models' (`default_adapters`, built on first use)."""
    from servefuzz.models import ADAPTERS, adapter_paths

    flags = PRESETS[preset].adapter_flags
    if flags is None:
        raise UsageError(f"--launch {preset} loads no LoRA adapters")
    paths = default_adapters() if root is None else adapter_paths(root)
    return flags(tuple(zip(ADAPTERS, _adapter_files(paths, _format(preset)), strict=True)))


def adapters_for(preset: str, model: Path | None) -> Path | None:
    """The adapters' folder for the model `--model` names (None: the default models', which
    `adapter_flags` builds on first use): the DIR/lora that `servefuzz model build` wrote beside
    DIR's model. UsageError (one line) when there are none: an adapter must fit its model's
    shapes, and one made for another model stops the server's start, or loads and means nothing."""
    from servefuzz.models import adapter_paths

    if model is None:
        return None
    served = served_model(preset, model)
    if served.parent == _cached(_DEFAULT_MODELS):
        return None  # the cache's models predate the adapters, which are built beside them
    root = served.parent / "lora"
    if not all(p.exists() for p in _adapter_files(adapter_paths(root), _format(preset))):
        raise UsageError(f"--model {model}: no adapters beside it ({root}); the lora profile needs the ones "
                         "`servefuzz model build` writes with it")
    return root


def draft_for(model: Path | None) -> Path:
    """The draft model for the GGUF `--model` names (None: the default models, `default_draft`):
    the one `servefuzz model build` wrote beside it (DIR/draft/tiny-draft.gguf next to
    DIR/tiny.gguf). UsageError (one line) when there is none: a draft must share the model's
    vocabulary, and llama-server given one that does not starts anyway and drafts nothing
    ("the target and draft vocabs are not compatible", `/slots` speculative false)."""
    from servefuzz.models import draft_path

    if model is None:
        return default_draft()
    gguf = gguf_model(model)
    if gguf.parent == _cached(_DEFAULT_MODELS):
        return default_draft()  # the cache's models predate the draft, which is built beside them
    beside = draft_path(gguf.parent / "draft")
    if not beside.is_file():
        raise UsageError(f"--model {model}: no draft model beside it ({beside}); the spec-draft profile needs the "
                         "one `servefuzz model build` writes with it")
    return beside


# -- models for the presets ------------------------------------------------------------------


_DEFAULT_MODELS = "tiny-seed0"  # the cache's folder of the default models (`default_models`)


def _cached(name: str) -> Path:
    """`cache_dir()/models/NAME`, where `_built_once` builds NAME (nothing is built here)."""
    return cache_dir() / "models" / name


def _built_once(name: str, build: Callable[[Path], object]) -> Path:
    """`cache_dir()/models/NAME`, built by `build(folder)` on first use: built aside and renamed,
    so a half-built folder is never used; the `.complete` mark says it was finished."""
    root = _cached(name)
    if not (root / ".complete").is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root.parent))
        build(staging)
        (staging / ".complete").touch()
        if not (root / ".complete").is_file():  # a half-built folder of a process that died
            shutil.rmtree(root, ignore_errors=True)
        try:
            staging.rename(root)
        except OSError:
            # Another process (a parallel test worker, a second campaign) built it first: the
            # builds are the same bits (seed 0), so keep theirs.
            shutil.rmtree(staging, ignore_errors=True)
            if not (root / ".complete").is_file():
                raise
    return root


def default_models() -> Path:
    """The tiny float32 models (seed 0) in the cache, built on first use: what a preset serves
    when the user names no `--model`."""
    from servefuzz.models import build_models  # needs the `models` extra; only when used

    return _built_once(_DEFAULT_MODELS, lambda folder: build_models(folder, dtype="float32", seed=0))


def arch_models(arch: str, dtype: str = "float32", build: str | None = None) -> Path:
    """servefuzz's tiny model of `arch` (seed 0) in the cache, built on first use
    (`tiny-ARCH-seed0-KEY/`: `hf-float32/` and, where llama.cpp's converter is here and takes it,
    `ARCH.gguf`; `tiny-ARCH-seed0-DTYPE-KEY/` in another type, `Preset.arch_dtypes`;
    `tiny-ARCH-seed0[-DTYPE]-judgeable-KEY/` for the opt-in `judgeable` build, `models.judgeable`): what
    `--model-arch` (and `--model-build`) serves. llama has one build; in float32 it is the
    presets' own default models.

    KEY (`models.build_key`) hashes the model builder's source, the arguments (the build among
    them) and the converter (its path, which names the llama.cpp build, and its sources): a
    change to any of them builds anew (a folder built before a converter was here gets its GGUF
    then), where a bare name kept serving the first build whatever changed since."""
    from servefuzz.models import BUILDS, DEFAULT_BUILD, build_arch, build_key  # needs the `models` extra

    build = build or DEFAULT_BUILD
    if build not in BUILDS:
        raise UsageError(f"unknown model build {build!r} (choose from {', '.join(BUILDS)})")
    if arch == "llama" and dtype == "float32":
        return default_models()
    if arch == "llama":
        build = DEFAULT_BUILD  # llama has one build (the dense baseline, written by hand)
    converter = gguf_converter()
    key = build_key(arch, dtype, 0, str(converter), _converter_digest(converter), build)
    name = (f"tiny-{arch}-seed0" + ("" if dtype == "float32" else f"-{dtype}")
            + ("" if build == DEFAULT_BUILD else f"-{build}") + f"-{key}")
    return _built_once(name, lambda folder: build_arch(folder, arch, dtype=dtype, converter=converter, build=build))


def _converter_digest(converter: Path | None) -> str | None:
    """A hash of llama.cpp's converter: its script and the two packages beside it that it imports
    (`conversion/`, `gguf-py/`, as `models.gguf_convert` puts them on its path); None without one."""
    if converter is None or not converter.is_file():
        return None
    digest = hashlib.sha256(converter.read_bytes())
    for source in sorted([*converter.parent.glob("conversion/**/*.py"), *converter.parent.glob("gguf-py/gguf/**/*.py")]):
        digest.update(str(source.relative_to(converter.parent)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def default_adapters() -> AdapterPaths:
    """servefuzz's tiny LoRA adapters for the default models (seed 0) in the cache, built on first
    use beside them (the models' own folder predates adapters and stays as it is)."""
    from servefuzz.models import adapter_paths, build_adapters  # needs the `models` extra; only when used

    return adapter_paths(_built_once("tiny-seed0-lora", lambda folder: build_adapters(folder, seed=0)))


def default_draft() -> Path:
    """servefuzz's tiny draft model for the default GGUF (seed 0) in the cache, built on first use
    beside it (`tiny-seed0-draft/`; the models' own folder predates the draft and stays as it is)."""
    from servefuzz.models import build_draft, draft_path  # needs the `models` extra; only when used

    return draft_path(_built_once("tiny-seed0-draft", lambda folder: build_draft(folder, seed=0)))


def hf_model_dir(model: Path | None) -> Path:
    """The Hugging Face folder a preset of that format serves: `model` itself, or the `hf-*`
    folder inside a `servefuzz model build` output, or the default tiny model when `model` is None."""
    if model is None:
        return default_models() / "hf-float32"
    if not model.exists():
        raise UsageError(f"--model {model}: no such file or folder")
    if not model.is_dir():
        raise UsageError(f"--model {model}: the preset serves a Hugging Face model folder (with config.json), not a file")
    if (model / "config.json").is_file():
        return model
    built = sorted(p.parent for p in model.glob("hf-*/config.json"))
    if len(built) == 1:
        return built[0]
    if built:
        raise UsageError(f"--model {model} holds {', '.join(p.name for p in built)}: name one of them")
    raise UsageError(f"--model {model}: not a Hugging Face model folder (no config.json)")


def model_config(hf_dir: Path) -> dict[str, object]:
    """A model folder's config.json; empty when it has none or it cannot be read."""
    try:
        config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def model_dtype(hf_dir: Path) -> str:
    """The weight type a model folder declares (`dtype`, or the older `torch_dtype`); `auto` when
    it declares none or cannot be read, which lets vLLM decide."""
    config = model_config(hf_dir)
    dtype = config.get("dtype") or config.get("torch_dtype")
    return dtype if isinstance(dtype, str) and dtype in ("float32", "bfloat16", "float16") else "auto"


def gguf_model(model: Path | None) -> Path:
    """The GGUF llama-server should serve: `model`, the one `*.gguf` in a folder, or the default."""
    if model is None:
        return default_models() / "tiny.gguf"
    if not model.exists():
        raise UsageError(f"--model {model}: no such file or folder")
    if model.is_file():
        return model
    found = sorted(model.glob("*.gguf"))
    if len(found) != 1:
        raise UsageError(f"--model {model}: expected one .gguf file there, found {len(found)}")
    return found[0]


def built_truth(preset: str, model: Path) -> Path | None:
    """What the exact truth computes for a `--model` servefuzz built into the cache
    (`default_models`, `arch_models`: what `--model-arch` serves), or None for any other model.
    The default llama's file as `preset` serves it (its GGUF is another model than its HF folder:
    a vocabulary of its own); an architecture's HF folder whichever format `preset` serves (its
    GGUF, where there is one, is llama.cpp's converter's float32 copy of those weights)."""
    root = model.resolve()
    if root.parent != (cache_dir() / "models").resolve() or not (root / ".complete").is_file():
        return None
    if root.name == _DEFAULT_MODELS:
        return served_model(preset, root)
    found = sorted(root.glob("hf-*/config.json"))
    return found[0].parent if len(found) == 1 else None


def served_model(preset: str, model: Path | None) -> Path:
    """The model `preset` serves for `--model` (None: the default tiny one), in its engine's
    format (`EngineSpec.model_format`): the GGUF or the Hugging Face folder."""
    return gguf_model(model) if _format(preset) == "gguf" else hf_model_dir(model)
