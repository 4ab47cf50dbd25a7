"""The house's floor plan (docs/layout.md; issue 42): imports in module_utils/ncclprep run one way.

Every ``from ansible.module_utils.ncclprep... import`` counts, at the top of a file or inside a
function alike: a deferred import hides a cycle from Python, not from the reader."""

from __future__ import annotations

import ast
import os

PACKAGE = "ansible.module_utils.ncclprep"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def modules(root: str) -> dict[str, str]:
    """``{dotted name under the package: path}`` of every .py file below ``root`` (a package's
    ``__init__.py`` under the package's own name; the top ``__init__`` left out)."""
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(folder, name), root)[:-3].replace(os.sep, ".")
                rel = rel[: -len(".__init__")] if rel.endswith(".__init__") else rel
                if rel != "__init__":
                    out[rel] = os.path.join(folder, name)
    return out


def import_graph(root: str) -> dict[str, set[str]]:
    """``{module: the package's modules it imports}``, from the files' syntax trees: ``from
    PACKAGE.a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``; ``from PACKAGE
    import a`` names ``a``."""
    mods = modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                continue
            if node.module != PACKAGE and not node.module.startswith(PACKAGE + "."):
                continue
            base = node.module[len(PACKAGE) + 1:]
            for alias in node.names:
                name = f"{base}.{alias.name}" if base else alias.name
                target = name if name in mods else base
                if target and target in mods and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycle_in_module_utils():
    """At 64ebd4f there were three (house.md): collectives <-> collective_blame; model -> doctor ->
    concerns -> model with two parsers; and the node commands around nodecheck's router."""
    graph = import_graph(os.path.join(REPO, "module_utils", "ncclprep"))
    assert len(graph) > 50  # the package was read, not an empty folder
    assert "probes.collectives" in graph["probes.job"] and "cli" not in graph["node.check"]
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_a_deferred_import_hides(tmp_path):
    """The finder itself: a import b at the top, b imports a inside a function (Python runs it
    fine), c imports a one way only."""
    pkg = tmp_path / "ncclprep"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(f"from {PACKAGE}.sub.b import f\n")
    (pkg / "sub" / "b.py").write_text(f"def f():\n    from {PACKAGE} import a\n    return a\n")
    (pkg / "c.py").write_text(f"from {PACKAGE}.a import f\n")
    graph = import_graph(str(pkg))
    assert graph == {"a": {"sub.b"}, "sub": set(), "sub.b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "sub.b"]]
