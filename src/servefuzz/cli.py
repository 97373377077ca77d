"""servefuzz: find the bugs LLM serving engines show only under concurrent load.

The command line parses, calls one function of `servefuzz.commands`, and prints. Every
`ServefuzzError` becomes one line on stderr and its exit code; bad input never prints a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from servefuzz import __version__
from servefuzz.argtypes import positive_float, positive_int
from servefuzz.errors import ServefuzzError, UsageError

__all__ = ["main", "build_parser"]

EXIT_FOUND = 1  # fuzz: found something; replay: not reproduced

# Commands whose module owns its flags: name -> (module with `main(argv) -> int`, help).
DELEGATED: dict[str, tuple[str, str]] = {
    "shrink": ("servefuzz.shrink", "shrink a finding to a minimal workload that still reproduces"),
    "triage": ("servefuzz.triage", "relaunch the server under flag variants and name the component"),
    "report": ("servefuzz.report", "write repro.py, issue.md and report.html for a finding"),
    "serve-reference": ("servefuzz.reference.server", "start the embedded reference engine"),
}


def build_parser() -> argparse.ArgumentParser:
    from servefuzz.commands import EMBEDDED_FAULT, EMBEDDED_TIME_S, REMOTE_TIME_S

    p = argparse.ArgumentParser(prog="servefuzz", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--version", action="version", version=f"servefuzz {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

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
    )
    where = f.add_mutually_exclusive_group()
    where.add_argument("--url", help="base URL of a running server to fuzz (default: start the embedded reference engine)")
    where.add_argument("--launch", metavar="PRESET",
                       help="start the server and own it (restarted after a crash): vllm-cpu, llama-server, "
                            "reference, or your own command with {port}, e.g. \"llama-server -m m.gguf --port {port}\"")
    f.add_argument("--model", type=Path, metavar="PATH",
                   help="with a --launch preset: the HF folder (vllm-cpu) or GGUF (llama-server) to serve "
                        "(default: tiny models servefuzz builds into its cache)")
    f.add_argument("--engine", help="dialect: sglang, vllm, llamacpp, openai, reference (default: detected)")
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
    stop = f.add_mutually_exclusive_group()
    stop.add_argument("--stop-at-first", dest="stop_at_first", action="store_true", default=None,
                      help="stop at the first confirmed finding (default on the embedded engine)")
    stop.add_argument("--keep-going", dest="stop_at_first", action="store_false",
                      help="keep fuzzing after a finding until the budget is spent")
    f.add_argument("--json", action="store_true", help="print one JSON summary on stdout instead of the display")

    r = sub.add_parser("replay", help="replay a finding against a server and say whether it reproduces",
                       description="Replay FINDING --runs times; exit 0 when CONFIRMED, 1 when NOT REPRODUCED.")
    r.add_argument("finding", type=Path, metavar="FINDING")
    r.add_argument("--base-url", required=True, help="server to replay against, e.g. http://127.0.0.1:30000")
    r.add_argument("--runs", type=positive_int, default=10, help="replays (default 10)")
    r.add_argument("--engine", help="dialect (default: the engine recorded in the finding)")

    m = sub.add_parser("model", help="build tiny random-weight models for real engines (no hub needed)")
    m.add_argument("action", choices=["build"], help="build: write an HF model folder and a GGUF into DIR")
    m.add_argument("rest", nargs=argparse.REMAINDER, help="DIR [--dtype float32|bfloat16] [--seed N]")

    for name, (_, text) in DELEGATED.items():
        sub.add_parser(name, add_help=False, help=f"{text} (see: servefuzz {name} --help)")
    return p


def _cmd_fuzz(args: argparse.Namespace) -> int:
    from rich.console import Console

    from servefuzz.campaign import check_campaign_dir
    from servefuzz.commands import EMBEDDED_FAULT, FuzzOptions, embedded_banner, fuzz
    from servefuzz.progress import LiveProgress, print_banner, print_summary
    from servefuzz.strategies import get_strategies
    from servefuzz.traces import read_trace

    if args.fault and (args.url or args.launch not in (None, "reference")):
        raise UsageError("--fault plants faults in the reference engine; use it without --url, or with --launch reference")
    # The embedded default shows a bug being found; a reference engine asked for by name is clean.
    default_faults = (EMBEDDED_FAULT,) if args.url is None and args.launch is None else ("none",)
    opts = FuzzOptions(
        out=args.out,
        url=args.url,
        launch=args.launch,
        model=args.model,
        engine=args.engine,
        faults=tuple(args.fault or default_faults),
        requests=args.requests,
        time_s=args.time,
        seed=args.seed,
        runs=max(2, args.runs),
        confirm_runs=args.confirm_runs,
        strategy=args.strategy,
        stop_at_first=args.stop_at_first,
        resume=args.resume,
        trace=args.trace,
        slowdowns=args.slowdowns,
    )
    # Validate everything before the banner or any server starts.
    opts.validate()
    get_strategies(opts.identity()[1])
    check_campaign_dir(opts.out, resume=opts.resume)
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
        with LiveProgress(console, f"fuzzing {target}") as live:
            result = fuzz(opts, on_event=live.update)
        print_summary(Console(), result)
    return EXIT_FOUND if result.found else 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from servefuzz.commands import replay
    from servefuzz.replay_report import render_replay_report

    _, result = replay(args.finding, args.base_url, args.runs, args.engine)
    sys.stdout.write(render_replay_report(result))
    return 0 if result.confirmed else EXIT_FOUND


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in DELEGATED:
            # These commands parse their own flags (the reference engine's are SGLang-shaped).
            module = importlib.import_module(DELEGATED[argv[0]][0])
            return int(module.main(argv[1:]))
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command == "fuzz":
            return _cmd_fuzz(args)
        if args.command == "replay":
            return _cmd_replay(args)
        if args.command == "model":
            from servefuzz.models import main as model_main

            return model_main(args.rest)
        parser.print_help(sys.stderr)
        return 2
    except ServefuzzError as e:
        print(f"servefuzz: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("servefuzz: interrupted; findings written so far are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
