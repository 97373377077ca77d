"""The architecture the code must keep: docs/architecture.md's layer table, enforced.

The table is read from the document itself, so the page and this test cannot drift apart: a
module missing from the table, a module the table names that does not exist, an import that
points to a layer to its right, a cycle, or an import between the reference engine (a program
apart) and the fuzzer fails here. Imports are read with `ast`, those inside functions and
under `TYPE_CHECKING` included.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
DOC = ROOT / "docs" / "architecture.md"
PACKAGE = "servefuzz"
REFERENCE = "servefuzz.reference"
# Code servefuzz ships for another interpreter (the stand-ins SGLang imports in its own venv):
# it imports nothing of servefuzz's, and nothing of servefuzz's imports it.
FOREIGN = "servefuzz.standins"
# What the program apart may take from the fuzzer's package: the architecture modules of `models`
# (one per architecture: its name and layer layout, data), so that the reference engine serves an
# architecture as servefuzz builds it for the real engines, defined once.
SHARED_WITH_APART = "servefuzz.models."


def layer_table(doc: str) -> list[tuple[str, list[str]]]:
    """[(layer, [module or package/ ...])] from the markdown table under 'Layers'."""
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] not in ("layer", "") and not set(cells[0]) <= {"-"}:
            rows.append((cells[0], re.findall(r"`([\w/.]+)`", cells[1])))
    return rows


def modules(src: Path, package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def imports_of(path: Path, name: str, package: str, known: set[str] | None = None) -> set[str]:
    """Every servefuzz module `path` imports (relative imports resolved). Given the `known`
    modules, `from pkg import x` is an import of the module `pkg.x` when there is one and of
    `pkg` itself (its `__init__`) otherwise; without them, of both."""
    found: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            subs = {f"{base}.{a.name}" for a in node.names}  # `from pkg import module`
            found |= subs if known is None else subs & known
            if known is None or not subs <= known:
                found.add(base)
    return {m for m in found if m == package or m.startswith(package + ".")}


def layer_of(module: str, table: list[tuple[str, list[str]]], package: str) -> int | None:
    """The index of the layer that holds `module` (the most specific entry wins)."""
    best: tuple[int, int] | None = None  # (specificity, layer)
    rel = module[len(package) + 1:] if module != package else package
    for i, (_, entries) in enumerate(table):
        for entry in entries:
            if entry.endswith("/"):
                pkg = entry[:-1].replace("/", ".")
                if rel == pkg or rel.startswith(pkg + "."):
                    spec = len(pkg)
                else:
                    continue
            elif rel == entry or (entry == package and module == package):
                spec = 1000
            else:
                continue
            if best is None or spec > best[0]:
                best = (spec, i)
    return None if best is None else best[1]


def entry_of(module: str, entries: list[str], package: str) -> int:
    """The index, within its layer's row, of the entry that holds `module` (most specific)."""
    rel = module[len(package) + 1:] if module != package else package
    best = (-1, -1)
    for i, entry in enumerate(entries):
        pkg = entry.rstrip("/").replace("/", ".")
        if rel == pkg or (entry.endswith("/") and rel.startswith(pkg + ".")) or (entry == package == module):
            best = max(best, (len(pkg), i))
    return best[1]


def violations(src: Path, package: str, table: list[tuple[str, list[str]]], apart: str,
               foreign: str = "", shared: str = "") -> list[str]:
    """What breaks the table: unplaced modules, upward imports, cycles, crossings of `apart`
    (but for its imports of modules under `shared`), any import into or out of `foreign`."""
    mods = dict(modules(src, package))
    known = set(mods)
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        # Every import runs the root package's __init__ first; it is the public facade and
        # loads nothing eagerly, so naming a submodule through it (`from servefuzz import
        # engines`) is no edge to it; taking one of its own names (`from servefuzz import fuzz`)
        # is, and the facade sits in the edges layer.
        targets = {t for t in imports_of(path, name, package, known) if t in known and t != name}
        graph[name] = targets
        if foreign and (name == foreign or name.startswith(foreign + ".")):
            problems += [f"{name} (for another interpreter) imports {t}" for t in sorted(imports_of(path, name, package))]
            continue
        problems += [f"{name} imports {t}, which is for another interpreter" for t in sorted(targets)
                     if foreign and (t == foreign or t.startswith(foreign + "."))]
        inside = name == apart or name.startswith(apart + ".")
        for t in sorted(targets):
            t_inside = t == apart or t.startswith(apart + ".")
            if inside and not t_inside and t != package and not (shared and t.startswith(shared)):
                problems.append(f"{name} (the program apart) imports {t}")
            if t_inside and not inside and name != f"{package}.cli":
                problems.append(f"{name} imports {t}: only the CLI may start the program apart")
        if inside or name.endswith("__main__"):
            continue
        mine = layer_of(name, table, package)
        if mine is None:
            problems.append(f"{name} is in no layer of the table")
            continue
        for t in sorted(targets):
            if t == apart or t.startswith(apart + "."):
                continue
            theirs = layer_of(t, table, package)
            if theirs is not None and theirs > mine:
                problems.append(f"{name} ({table[mine][0]}) imports {t} ({table[theirs][0]}): an upward import")
            elif theirs == mine and (a := entry_of(name, table[mine][1], package)) < (
                    b := entry_of(t, table[mine][1], package)):
                # Within a layer the table's order is the direction: a module imports only what
                # its row lists before it (inside one package entry the cycle check holds).
                problems.append(f"{name} imports {t}, listed after it in the {table[mine][0]} layer "
                                f"({table[mine][1][a]} before {table[mine][1][b]}): against the row's order")
    for (layer, entries) in table:
        for entry in entries:
            mod = package if entry == package else f"{package}.{entry.rstrip('/').replace('/', '.')}"
            if mod not in known:
                problems.append(f"the table's {layer} layer names {entry}, which does not exist")
    problems += [f"import cycle: {' -> '.join(c)}" for c in _cycles(graph)]
    return problems


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    # A package importing its own submodules (re-exports) is not a cycle of concepts.
    def real(a: str, b: str) -> bool:
        return not b.startswith(a + ".") and not a.startswith(b + ".")

    seen: set[str] = set()
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(n: str) -> None:
        seen.add(n)
        stack.append(n)
        on.add(n)
        for m in sorted(graph.get(n, ())):
            if not real(n, m):
                continue
            if m in on:
                found.append([*stack[stack.index(m):], m])
            elif m not in seen:
                visit(m)
        stack.pop()
        on.discard(n)

    for n in sorted(graph):
        if n not in seen:
            visit(n)
    return found


def test_the_code_keeps_the_documented_layers() -> None:
    table = layer_table(DOC.read_text(encoding="utf-8"))
    assert [name for name, _ in table] == ["data", "logic", "I/O", "edges"]
    assert violations(SRC, PACKAGE, table, REFERENCE, FOREIGN, SHARED_WITH_APART) == []


def write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.mark.parametrize(
    "files, complaint",
    [
        ({"pkg/rec.py": "from pkg.loop import go\n"}, "pkg.rec (data) imports pkg.loop (I/O): an upward import"),
        ({"pkg/rec.py": "def f():\n    import pkg.loop\n"}, "an upward import"),  # inside a function too
        ({"pkg/ref/eng.py": "from pkg.rec import R\n"}, "pkg.ref.eng (the program apart) imports pkg.rec"),
        ({"pkg/loop.py": "import pkg.ref.eng\n"}, "only the CLI may start the program apart"),
        ({"pkg/extra.py": ""}, "pkg.extra is in no layer of the table"),
        ({"pkg/rec.py": "from pkg import logic\n", "pkg/logic.py": "from pkg import rec\n"}, "import cycle"),
        ({"pkg/far/shim.py": "from pkg.rec import R\n"}, "pkg.far.shim (for another interpreter) imports pkg.rec"),
        ({"pkg/loop.py": "import pkg.far.shim\n"}, "pkg.loop imports pkg.far.shim, which is for another interpreter"),
        # Within a layer: the row lists rec before clock, so clock may import rec, not the reverse.
        ({"pkg/rec.py": "from pkg.clock import T\n"}, "pkg.rec imports pkg.clock, listed after it in the data layer"),
        # The root's own names are the facade's, in the edges layer; a submodule named through it is not.
        ({"pkg/logic.py": "from pkg import go\n"}, "pkg.logic (logic) imports pkg (edges): an upward import"),
        ({"pkg/cli.py": "from pkg import go\n"}, "pkg.cli imports pkg, listed after it in the edges layer"),
    ],
)
def test_the_check_fails_on_a_planted_violation(tmp_path: Path, files: dict[str, str], complaint: str) -> None:
    base = {"pkg/__init__.py": "", "pkg/rec.py": "", "pkg/logic.py": "from pkg.rec import R\n", "pkg/loop.py": "",
            "pkg/cli.py": "import pkg.ref.eng\n", "pkg/ref/__init__.py": "", "pkg/ref/eng.py": "",
            "pkg/far/shim.py": "import torch\n",  # for another interpreter: in no layer, imports none of pkg
            "pkg/clock.py": "from pkg.rec import R\n", "pkg/api.py": "from pkg import rec, cli\n"}
    table = [("data", ["rec", "clock"]), ("logic", ["logic"]), ("I/O", ["loop"]), ("edges", ["cli", "api", "pkg"])]
    write(tmp_path, base)
    assert violations(tmp_path, "pkg", table, "pkg.ref", "pkg.far") == []  # the clean tree passes
    write(tmp_path, files)
    found = violations(tmp_path, "pkg", table, "pkg.ref", "pkg.far")
    assert any(complaint in p for p in found), found
