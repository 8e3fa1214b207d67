"""mecheval's modules import each other without a cycle, and `models` never imports an adapter (`mecheval.hf`
registers its model kind itself, `models.kinds`). Imports inside functions count: they run, only later.

The graph is read from the source with `ast`: an edge per `import mecheval.X` / `from mecheval.X import name`
(to the module `mecheval.X.name` where that is a module, else to `mecheval.X`); importing a module's package
first is Python's doing, not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mecheval

SOURCE = Path(mecheval.__file__).parent.parent  # src/, holding mecheval/
ALLOWED_CYCLES: list[set[str]] = []  # none: a cycle that must stay is named here, with why


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its __init__.py) -> its file."""
    found = {}
    for path in sorted((SOURCE / "mecheval").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, known: dict[str, Path]) -> str:
    """The longest prefix of dotted `name` that is a module (`mecheval.models.lm.LM` -> `mecheval.models.lm`)."""
    while name not in known:
        name = name.rpartition(".")[0]
    return name


def imports(name: str, known: dict[str, Path]) -> dict[str, int]:
    """The modules of the package that module `name` imports anywhere in its file -> the first line doing so."""
    path = known[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x`, `from ..y import z`
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            if target == "mecheval" or target.startswith("mecheval."):
                module = _owner(target, known)
                if module != name:
                    found.setdefault(module, node.lineno)
    return found


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: line}, for every module of the package."""
    known = modules()
    return {name: imports(name, known) for name in known}


def cycles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = {stack.pop()}
            while v not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def _edges(graph: dict[str, dict[str, int]], component: set[str]) -> str:
    return "\n".join(f"  {a} -> {b} (line {line})" for a in sorted(component)
                     for b, line in sorted(graph[a].items()) if b in component)


def test_the_package_imports_without_a_cycle():
    graph = import_graph()
    new = [c for c in cycles(graph) if c not in ALLOWED_CYCLES]
    assert not new, "import cycles (move the shared name into the module that owns it):\n" + "\n".join(
        _edges(graph, c) for c in new)


def test_models_never_import_an_adapter():
    graph = import_graph()
    found = [f"{m} -> {t} (line {line})" for m, targets in graph.items() if m.startswith("mecheval.models")
             for t, line in targets.items() if t.startswith("mecheval.hf")]
    assert not found, "models import mecheval.hf (register a model kind instead, models.kinds):\n" + "\n".join(found)


def test_the_graph_sees_imports_inside_functions_and_relative_ones(tmp_path):
    known = {name: tmp_path / f"{name}.py" for name in ("mecheval.a", "mecheval.b", "mecheval.c")}
    known["mecheval.a"].write_text("def f():\n    from mecheval.b import thing\n")
    known["mecheval.b"].write_text("from . import c\n")
    known["mecheval.c"].write_text("import mecheval.a\n")
    graph = {name: imports(name, known) for name in known}
    assert graph == {"mecheval.a": {"mecheval.b": 2}, "mecheval.b": {"mecheval.c": 1}, "mecheval.c": {"mecheval.a": 1}}
    assert cycles(graph) == [{"mecheval.a", "mecheval.b", "mecheval.c"}]
