#!/usr/bin/env python3
"""One source of truth per finding package (docs/findings/<name>/package.toml), and the check
that every draft beside it still says what it records.

A package's record holds its status (one line: file / comment on #N / known, do not file /
fixed in V), the upstream threads with their state and the date they were read, the versions
tested and the newest one, what differs from a stock setup, and every number its drafts to post
quote with the file it comes from. From it:

    python3 scripts/findings.py sync            # write each draft's status line and README's table
    python3 scripts/findings.py check           # what no longer agrees; exit 1 when anything
    python3 scripts/findings.py run PKG LABEL --serve 'CMD' --url URL [--model DIR] -- python3 minimal_repro.py URL 10

`check` (tests/test_findings_packages.py runs it on every package) finds:
- a draft (README.md and the record's `drafts`) without the record's status line near its top;
- a command in a draft's shell block that no output file of the package records byte for byte
  (as a `$ COMMAND` line, which `run` writes);
- a number in a draft to post (a rate k/n, a decimal) that the record does not map to a file of
  the package, or whose file does not contain it (a finding's JSON holds its counts as fields:
  there the file's presence is what is checked);
- an upstream thread a draft calls by another state than the record ("#N (closed" against open);
- a minimal_repro.py over 60 lines or importing outside the standard library (and the record's
  declared exceptions), or with neither a kept output nor the reason it was not run.

`run` starts a server with a command, in a work folder where `./tiny` is the cached model and the
package's scripts are copied, runs one command against it and writes the package's output file:
both commands as `$` lines, then what the second printed, then its exit status.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FINDINGS = ROOT / "docs" / "findings"
README = ROOT / "README.md"
STATUS_KINDS = re.compile(r"(file|comment on \S*#\d+|known, do not file|fixed in \S+)\b")
MAX_LINES = 60
SHELL_FENCE = re.compile(r"^(`{3,})(?:bash|sh|shell|console)\n(.*?)^\1$", re.M | re.S)
# A rate (k/n) or a decimal measurement; a version (three parts), a path or a URL is none.
NUMBER = re.compile(r"(?<![\w./#])(\d+/\d+|\d+\.\d+(?:e-?\d+)?|\d+e-\d+)(?![\w/]|\.\d)")
URL = re.compile(r"https?://\S+|\]\([^)]*\)")
STATE_SAID = re.compile(r"#(\d+)\*{0,2},? \(?(open|closed|merged)\b")
BLOCK_START = "<!-- package.toml, as scripts/findings.py sync writes it: edit the record, not this -->"
BLOCK_END = "<!-- end of package.toml -->"
TABLE_START = "<!-- findings table: scripts/findings.py sync writes it from each package.toml -->"
TABLE_END = "<!-- end of the findings table -->"


@dataclass(frozen=True)
class Upstream:
    ref: str      # owner/repo#N
    state: str    # open, closed, merged, closed unmerged, ...
    what: str


@dataclass(frozen=True)
class Package:
    """A package's record, as package.toml holds it."""

    folder: Path
    engine: str
    title: str
    status: str
    read: str
    drafts: tuple[str, ...]
    upstream: tuple[Upstream, ...]
    tested: tuple[dict[str, str], ...]
    newest: str
    deviations: tuple[str, ...]
    numbers: dict[str, str]
    minimal_output: tuple[str, ...] = ()
    minimal_not_run: str = ""
    minimal_imports: tuple[str, ...] = ()
    outputs: tuple[str, ...] = field(default=())

    @property
    def status_line(self) -> str:
        return f"**Status (upstream read {self.read}):** {self.status}"

    @property
    def block(self) -> str:
        """What README shows of the record, after its status line."""
        lines = [BLOCK_START, "", f"- **Upstream** (read {self.read}):"]
        lines += [f"  - {u.ref} ({u.state}): {u.what}" for u in self.upstream] or ["  - none found"]
        lines += ["- **Tested:**"]
        lines += [f"  - {t['version']}: {t['result']} ([{t['file']}]({t['file']}))" for t in self.tested]
        lines += [f"- **Newest:** {self.newest}", "- **Not stock:**"]
        lines += [f"  - {d}" for d in self.deviations]
        if self.minimal_not_run:
            lines += [f"- **minimal_repro.py not run:** {self.minimal_not_run}"]
        return "\n".join([*lines, "", BLOCK_END])

    @classmethod
    def load(cls, folder: Path) -> Package:
        r = tomllib.loads((folder / "package.toml").read_text(encoding="utf-8"))
        return cls(folder, r["engine"], r["title"], r["status"], r["read"], tuple(r.get("drafts", ())),
                   tuple(Upstream(u["ref"], u["state"], u["what"]) for u in r.get("upstream", ())),
                   tuple(r["tested"]), r["newest"], tuple(r["deviations"]), dict(r.get("numbers", {})),
                   tuple(r.get("minimal_output", ())), r.get("minimal_not_run", ""),
                   tuple(r.get("minimal_imports", ())))


def packages() -> list[Package]:
    return [Package.load(p.parent) for p in sorted(FINDINGS.glob("*/package.toml"))]


def outputs_of(folder: Path) -> str:
    """Every output file of a package, as one text: the `$` lines `run` wrote are in there."""
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(folder.rglob("*"))
                     if p.suffix in (".txt", ".log") and p.is_file())


def commands(text: str) -> list[str]:
    """The commands of a markdown text's shell blocks: in a `console` block the `$ ` lines (the
    rest is output), elsewhere every line; lines ending in a backslash join the next; blank and
    comment lines are none."""
    found: list[str] = []
    for block in SHELL_FENCE.finditer(text):
        console = block.group(0).startswith(block.group(1) + "console")
        joined: list[str] = []
        for line in block.group(2).splitlines():
            joined.append(line)
            if line.endswith("\\"):
                continue
            command, joined = "\n".join(joined), []
            if console and not command.startswith("$ "):
                continue
            command = command.removeprefix("$ ")
            if command.strip() and not command.lstrip().startswith("#"):
                found.append(command)
    return found


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(URL.sub(" ", text)))


def problems(pkg: Package) -> list[str]:
    """What in the package no longer agrees with its record (empty: all of it does)."""
    out: list[str] = []
    name = pkg.folder.name
    if "\n" in pkg.status or not STATUS_KINDS.match(pkg.status):
        out.append(f"{name}: the status must be one line starting with file / comment on #N / "
                   f"known, do not file / fixed in V: {pkg.status!r}")
    recorded = outputs_of(pkg.folder)
    states = {u.ref.rsplit("#", 1)[1]: u.state.split()[0] for u in pkg.upstream}
    for draft in ("README.md", *pkg.drafts):
        path = pkg.folder / draft
        if not path.is_file():
            out.append(f"{name}/{draft}: missing")
            continue
        text = path.read_text(encoding="utf-8")
        if pkg.status_line not in text.splitlines()[:15]:
            out.append(f"{name}/{draft}: no status line (the record's, in its first 15 lines)")
        if draft == "README.md" and pkg.block not in text:
            out.append(f"{name}/README.md: its block of the record's facts is not the record's (scripts/findings.py sync)")
        for command in commands(text):
            if f"$ {command}" not in recorded:
                out.append(f"{name}/{draft}: a command no output of the package records: {command!r}")
        for number, state in STATE_SAID.findall(text):
            if number in states and states[number] != state:
                out.append(f"{name}/{draft}: calls #{number} {state}; the record: {states[number]}")
        if draft == "README.md":
            continue
        for number in sorted(numbers(text)):
            source = pkg.numbers.get(number)
            if source is None:
                out.append(f"{name}/{draft}: {number} has no file behind it in package.toml's numbers")
            elif not (pkg.folder / source).is_file():
                out.append(f"{name}/{draft}: {number}'s file {source} is not in the package")
            elif Path(source).suffix != ".json" and not re.search(
                    rf"(?<![\d.]){re.escape(number)}(?![\d])", (pkg.folder / source).read_text(encoding="utf-8")):
                out.append(f"{name}/{draft}: {number} is not in its file {source}")
    out += _minimal_problems(pkg)
    return out


def _minimal_problems(pkg: Package) -> list[str]:
    name, path = pkg.folder.name, pkg.folder / "minimal_repro.py"
    if not path.is_file():
        return [f"{name}: no minimal_repro.py"]
    text = path.read_text(encoding="utf-8")
    out = []
    if len(text.splitlines()) > MAX_LINES:
        out.append(f"{name}/minimal_repro.py: {len(text.splitlines())} lines, more than {MAX_LINES}")
    tree = ast.parse(text)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    foreign = imported - set(sys.stdlib_module_names) - set(pkg.minimal_imports)
    if foreign:
        out.append(f"{name}/minimal_repro.py: imports outside the standard library: {sorted(foreign)}")
    kept = [o for o in pkg.minimal_output if (pkg.folder / o).is_file()]
    if len(kept) != len(pkg.minimal_output) or not (kept or pkg.minimal_not_run):
        out.append(f"{name}: minimal_repro.py needs its kept output(s) or minimal_not_run, the reason")
    return out


def table(pkgs: list[Package]) -> str:
    rows = ["| engine | what goes wrong | status |", "|---|---|---|"]
    rows += [f"| {p.engine} | [{p.title}](docs/findings/{p.folder.name}/) | {p.status} |" for p in pkgs]
    return "\n".join([TABLE_START, *rows, TABLE_END])


def readme_problems(pkgs: list[Package]) -> list[str]:
    text = README.read_text(encoding="utf-8")
    return [] if table(pkgs) in text else ["README.md: the real-bug table is not the packages' (scripts/findings.py sync)"]


def sync(pkgs: list[Package]) -> None:
    """Write each draft's status line (replacing the old one, or after the title) and README's table."""
    for pkg in pkgs:
        for draft in ("README.md", *pkg.drafts):
            path = pkg.folder / draft
            lines = path.read_text(encoding="utf-8").splitlines()
            at = next((i for i, line in enumerate(lines[:15]) if line.startswith("**Status (upstream read ")), None)
            if at is None:  # after the title (the first "# " line: a draft may open with a comment)
                title = next((i for i, line in enumerate(lines) if line.startswith("# ")), 0)
                lines[title + 1:title + 1] = ["", pkg.status_line]
                at = title + 2
            else:
                lines[at] = pkg.status_line
            text = "\n".join(lines) + "\n"
            if draft == "README.md":
                if BLOCK_START in text:
                    start, end = text.index(BLOCK_START), text.index(BLOCK_END) + len(BLOCK_END)
                    text = text[:start] + pkg.block + text[end:]
                else:
                    head = "\n".join(lines[: at + 1]) + "\n"
                    text = head + "\n" + pkg.block + "\n" + text[len(head):]
            path.write_text(text, encoding="utf-8")
    text = README.read_text(encoding="utf-8")
    if TABLE_START in text:
        start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
        README.write_text(text[:start] + table(pkgs) + text[end:], encoding="utf-8")


def run(folder: Path, label: str, serve: str, url: str, command: list[str], model: Path | None, path: list[str],
        env: dict[str, str], timeout: float, links: dict[str, Path]) -> int:
    """Start `serve` in a work folder (./tiny -> `model`, ./NAME -> each of `links`, the package's
    scripts copied), wait for `url`/health, run `command` there, and write folder/minimal-output-LABEL.txt."""
    work = Path(tempfile.mkdtemp(prefix=f"findings-{folder.name}-"))
    for script in folder.glob("*.py"):
        shutil.copy2(script, work / script.name)
    for name, target in {**({"tiny": model} if model is not None else {}), **links}.items():
        (work / name).symlink_to(target)
    full = {**os.environ, **env, "PATH": os.pathsep.join([*path, os.environ["PATH"]])}
    log = open(work / "server.log", "wb")  # noqa: SIM115 - open for the server's life
    server = subprocess.Popen(serve, shell=True, cwd=work, env=full, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and server.poll() is None:
            try:
                urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5).read()
                break
            except OSError:
                time.sleep(1)
        else:
            raise SystemExit(f"the server did not answer {url}/health; its log: {work / 'server.log'}")
        done = subprocess.run(command, cwd=work, env=full, capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    program = next(w for w in serve.split() if "=" not in w)
    text = (f"# {label}: scripts/findings.py run, {when}, on a 2-core CPU box shared with other work\n"
            f"# the server's program: {shutil.which(program, path=full['PATH']) or program}; ./tiny: {model}"
            + "".join(f"; ./{name}: {target}" for name, target in links.items()) + "\n"
            f"$ {serve}\n$ {' '.join(command)}\n{done.stdout}{done.stderr}# exit status {done.returncode}\n")
    out = folder / f"minimal-output-{label}.txt"
    out.write_text(text, encoding="utf-8")
    print(text, end="")
    print(f"(written to {out}; the work folder, with the server's log: {work})", file=sys.stderr)
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("check")
    sub.add_parser("sync")
    r = sub.add_parser("run")
    r.add_argument("package")
    r.add_argument("label")
    r.add_argument("--serve", required=True, help="the server command, as a draft gives it")
    r.add_argument("--url", required=True)
    r.add_argument("--model", type=Path, help="what ./tiny is in the work folder")
    r.add_argument("--path", action="append", default=[], help="a folder put first on PATH (the engine's)")
    r.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server, not shown in its command")
    r.add_argument("--link", action="append", default=[], help="NAME=PATH: ./NAME in the work folder is PATH")
    r.add_argument("--timeout", type=float, default=600)
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    pkgs = packages()
    if args.verb == "sync":
        sync(pkgs)
        return 0
    if args.verb == "run":
        env = dict(e.split("=", 1) for e in args.env)
        links = {name: Path(target) for name, target in (a.split("=", 1) for a in args.link)}
        return run(FINDINGS / args.package, args.label, args.serve, args.url, command, args.model, args.path, env,
                   args.timeout, links)
    found = [p for pkg in pkgs for p in problems(pkg)] + readme_problems(pkgs)
    missing = sorted(d.name for d in FINDINGS.iterdir() if d.is_dir() and not (d / "package.toml").is_file())
    found += [f"{m}: no package.toml" for m in missing]
    print("\n".join(found) or f"{len(pkgs)} packages agree with their records")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
