"""No engine's name is compared outside the engines package and `targets/` (issue 25: an engine
is one spec, and nothing else in the code says its name).

Read with `ast`: a comparison (`==`, `!=`, `in`, `not in`, `is`) with an engine's name as a
literal (alone or in a tuple, list or set), a `case "vllm":`, a lookup by a literal name
(`table["sglang"]`, `table.get("llamacpp")`), a set of names (a membership table), a table keyed
by a name (`{"vllm-cpu": ...}`), and an `isinstance`/`issubclass` on a dialect's adapter class
(`isinstance(t, VLLMTarget)`: the same dispatch, by type) fail here. Code elsewhere asks
`servefuzz.engines.registry.spec_of(engine)`, or a field of the adapter. The spec's capabilities are the
adapters' own, one name each: a test holds them together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from servefuzz.engines import PRESETS
from servefuzz.engines.registry import SPECS, spec_of
from servefuzz.errors import UsageError
from servefuzz.targets import available_engines, make_target
from servefuzz.targets.base import unsupported
from servefuzz.workload import RequestSpec

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "servefuzz"
# Engines' names and their presets' (`sglang`, `sglang-cpu`): dispatching on either is saying an engine.
NAMES = frozenset(SPECS) | frozenset(PRESETS)
# The adapters' classes, by name (each registered adapter and the dialect classes it derives from;
# not the shared plumbing, `HttpTarget`): asking `isinstance` of one is dispatching on its engine.
DIALECT_CLASSES = frozenset(
    c.__name__ for e in available_engines() for c in type(make_target(e, "http://127.0.0.1:1")).__mro__
    if c.__module__.startswith("servefuzz.targets.") and c.__name__ != "HttpTarget")
# Where names may be said: the specs themselves, the dialect adapters, the reference engine (a
# program apart, which speaks its dialects by name) and the stand-ins (code for another interpreter).
ALLOWED_DIRS = ("engines", "targets", "reference", "standins")
# (module path, function, literal): why it stays. Every entry must still be needed.
ALLOW: dict[tuple[str, str, str], str] = {
    ("evidence.py", "Vote.to_json", "reference"):
        "a JSON key: the vote's reference output (what the fresh alone runs agree on), no engine",
    ("evidence.py", "Vote.from_json", "reference"):
        "the same JSON key, read back",
}


def _names_in(node: ast.AST) -> Iterator[str]:
    """Engine-name literals `node` is or directly holds (a tuple, list or set display)."""
    if isinstance(node, ast.Constant) and node.value in NAMES:
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for elt in node.elts:
            if isinstance(elt, ast.Constant) and elt.value in NAMES:
                yield elt.value


def _pattern_names(pattern: ast.pattern) -> Iterator[str]:
    if isinstance(pattern, ast.MatchValue):
        yield from _names_in(pattern.value)
    elif isinstance(pattern, ast.MatchOr):
        for p in pattern.patterns:
            yield from _pattern_names(p)


def _class_names(node: ast.AST) -> Iterator[str]:
    """Dialect classes `node` names (`VLLMTarget`, `mod.VLLMTarget`, `A | B`, `(A, B)`)."""
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        if name in DIALECT_CLASSES:
            yield name
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        yield from _class_names(node.left)
        yield from _class_names(node.right)
    elif isinstance(node, ast.Tuple | ast.List):
        for elt in node.elts:
            yield from _class_names(elt)


def said_names(tree: ast.AST) -> Iterator[tuple[int, str, str, str]]:
    """(line, enclosing function, literal, what) for each place `tree` dispatches on a name."""
    def walk(node: ast.AST, where: str) -> Iterator[tuple[int, str, str, str]]:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = f"{where}.{child.name}" if where else child.name
            if isinstance(child, ast.Compare):
                for side in (child.left, *child.comparators):
                    for name in _names_in(side):
                        yield child.lineno, inner, name, "compared"
            elif isinstance(child, ast.match_case):
                for name in _pattern_names(child.pattern):
                    yield child.pattern.lineno, inner, name, "matched"
            elif isinstance(child, ast.Subscript):
                for name in _names_in(child.slice):
                    yield child.lineno, inner, name, "looked up"
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute)
                  and child.func.attr in ("get", "pop", "setdefault") and child.args):
                for name in _names_in(child.args[0]):
                    yield child.lineno, inner, name, "looked up"
            elif isinstance(child, ast.Dict):
                for key in child.keys:
                    for name in _names_in(key) if key is not None else ():
                        yield child.lineno, inner, name, "a dict key"
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                  and child.func.id in ("isinstance", "issubclass") and len(child.args) == 2):
                for name in _class_names(child.args[1]):
                    yield child.lineno, inner, name, f"asked by {child.func.id}"
            elif isinstance(child, ast.Set) or (isinstance(child, ast.Call) and isinstance(child.func, ast.Name)
                                               and child.func.id in ("set", "frozenset") and child.args):
                elts = child if isinstance(child, ast.Set) else child.args[0]
                for name in _names_in(elts):
                    yield child.lineno, inner, name, "in a set of names"
            yield from walk(child, inner)

    yield from walk(tree, "")


# The engines package's own generic modules: one engine, one room, so they name none either; each
# engine's module (engines/sglang.py, ...) is the one place its names are said.
GENERIC = ("engines/__init__.py", "engines/spec.py", "engines/registry.py")


def offences(src: Path) -> tuple[list[str], set[tuple[str, str, str]]]:
    """What says an engine's name outside the allowed places, and the allow-list entries used."""
    found: list[str] = []
    used: set[tuple[str, str, str]] = set()
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel.split("/")[0] in ALLOWED_DIRS and rel not in GENERIC:
            continue
        for line, where, name, what in said_names(ast.parse(path.read_text(encoding="utf-8"))):
            key = (rel, where, name)
            if key in ALLOW:
                used.add(key)
                continue
            found.append(f"src/servefuzz/{rel}:{line} ({where or 'module'}): {name!r} {what}; ask spec_of(engine)")
    return found, used


def test_no_engine_name_is_compared_outside_the_engines_package_and_targets() -> None:
    found, used = offences(SRC)
    assert found == []
    assert set(ALLOW) - used == set(), "allow-list entries no longer needed: remove them"


@pytest.mark.parametrize(
    "code, what",
    [
        ('def f(t):\n    return t.engine == "vllm"\n', "compared"),
        ('def f(t):\n    return t.engine != "llamacpp"\n', "compared"),
        ('def f(t):\n    return t.engine in ("sglang", "reference")\n', "compared"),
        ('def f(e):\n    return e not in ["openai"]\n', "compared"),
        ('def f(e):\n    match e:\n        case "sglang" | "x":\n            return 1\n', "matched"),
        ('def f(t):\n    return PORTS["vllm"]\n', "looked up"),
        ('def f(t):\n    return PORTS.get("llamacpp", 8000)\n', "looked up"),
        ('SEEDED = frozenset({"vllm", "reference"})\n', "in a set of names"),
        # A table keyed by an engine's or a preset's name (install.py's installers were one).
        ('INSTALLERS = {"llama-server": 1, "x": 2}\n', "a dict key"),
        ('def f():\n    return {**{}, "sglang": 8}\n', "a dict key"),
        # Dispatch by the adapter's type (repro_full.py's dialect choice was one).
        ('def f(t):\n    return isinstance(t, VLLMTarget)\n', "asked by isinstance"),
        ('def f(t):\n    return isinstance(t, SGLangTarget | LlamaCppTarget)\n', "asked by isinstance"),
        ('def f(t):\n    return isinstance(t, (targets.OpenAITarget, int))\n', "asked by isinstance"),
        ('def f(c):\n    return issubclass(c, ReferenceTarget)\n', "asked by issubclass"),
    ],
)
def test_the_check_catches_a_planted_comparison(tmp_path: Path, code: str, what: str) -> None:
    (tmp_path / "mod.py").write_text(code)
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "ok.py").write_text(code)  # the adapters may say names
    found, _ = offences(tmp_path)
    assert len(found) >= 1 and all(f.startswith("src/servefuzz/mod.py:") for f in found) and what in found[0], found


def test_the_engines_package_s_generic_modules_name_no_engine_and_an_engine_s_own_module_may(tmp_path: Path) -> None:
    code = 'def plan(preset):\n    return 1 if preset == "sglang-cpu" else 2\n'
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "registry.py").write_text(code)
    (tmp_path / "engines" / "sglang.py").write_text(code)
    found, _ = offences(tmp_path)
    assert len(found) == 1 and found[0].startswith("src/servefuzz/engines/registry.py:2 (plan): 'sglang-cpu' compared"), found


def test_a_name_said_otherwise_is_no_offence(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text('def f(url, t):\n    return make_target("vllm", url), spec_of("sglang"), {"model": "vllm"}, '
                                     'isinstance(t, HttpTarget), isinstance(t, dict)\n')
    assert offences(tmp_path)[0] == []


def test_the_dialect_classes_are_the_adapters() -> None:
    assert {"SGLangTarget", "ReferenceTarget", "VLLMTarget", "OpenAITarget", "LlamaCppTarget"} <= DIALECT_CLASSES
    assert "HttpTarget" not in DIALECT_CLASSES


@pytest.mark.parametrize("engine", available_engines())
def test_every_adapter_has_a_spec_and_refuses_what_its_spec_cannot_send(engine: str) -> None:
    """One name each, decided once: an adapter's capabilities are its spec's, and a request
    asking for one it lacks is refused with the same line by the runner and by the adapter."""
    spec, target = spec_of(engine), make_target(engine, "http://127.0.0.1:1")
    assert spec.name == engine
    asks = {"salts": RequestSpec("r1", 0.0, (5, 6), 4, cache_salt="t"),
            "choices": RequestSpec("r1", 0.0, (5, 6), 4, choices=("a", "b"), ignore_eos=False),
            "adapters": RequestSpec("r1", 0.0, (5, 6), 4, adapter="lora-a")}
    for capability, request in asks.items():
        why = unsupported(target, request)
        assert (why is None) == getattr(spec, capability), (capability, why)
        if why is not None:
            with pytest.raises(UsageError, match="dialect has none"):
                (target.salt_of if capability == "salts" else target.choices_of if capability == "choices"
                 else target.adapter_of)(request)
    assert unsupported(target, RequestSpec("r1", 0.0, (5, 6), 4)) is None


def test_an_unknown_engine_is_a_generic_openai_server() -> None:
    spec = spec_of("my-engine")
    assert spec.name == "my-engine" and spec.default_port == 8000 and spec.deterministic is None
    assert not (spec.salts or spec.seeds or spec.choices or spec.adapters or spec.cache_prompt)
