"""scoring/'s import graph has no cycle, counting every import: at module level or inside a
function, absolute or relative. A cycle hidden behind a function-level import is still a
cycle: the two modules cannot be understood, tested or moved one without the other."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` (a folder under ``root``), by dotted name."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_names(module: str, path: Path) -> list[tuple[str, int]]:
    """(dotted name, line) of everything ``module`` imports, wherever the import stands;
    ``from a import b`` gives ``a.b`` (b may be a module) and ``a``."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # Relative to the package the module is in (a package's __init__ is in itself).
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def import_graph(root: Path, package: str) -> dict[str, dict[str, str]]:
    """module -> {module it imports: where ("path:line")}, inside ``package`` only."""
    modules = module_names(root, package)
    graph = {}
    for module, path in modules.items():
        edges = {}
        for name, line in imported_names(module, path):
            if name in modules and name != module:
                edges.setdefault(name, f"{path.relative_to(root)}:{line}")
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """One cycle through each strongly connected part of ``graph`` that has one (Tarjan)."""
    index, low, stack, on_stack, parts = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.add(member)
                if member == node:
                    break
            if len(part) > 1:
                parts.append(part)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [cycle_in(graph, part) for part in parts]


def cycle_in(graph: dict[str, dict[str, str]], part: set[str]) -> list[str]:
    """A path inside ``part`` (strongly connected) from its first module back to it."""
    start = min(part)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                return paths[node] + [start]
            if target in part and target not in paths:
                paths[target] = paths[node] + [target]
                frontier.append(target)
    raise AssertionError(f"{sorted(part)} is not strongly connected")


def described(graph: dict[str, dict[str, str]], cycle: list[str]) -> str:
    return " -> ".join(cycle) + "\n" + "\n".join(
        f"    {source} imports {target} at {graph[source][target]}" for source, target in zip(cycle, cycle[1:])
    )


def test_scoring_has_no_import_cycle():
    graph = import_graph(REPO, "scoring")
    assert "scoring.judge.llm" in graph["scoring.services"]  # the graph is read at all

    found = cycles(graph)

    assert not found, "import cycles in scoring/:\n" + "\n".join(described(graph, cycle) for cycle in found)


def test_function_level_and_relative_imports_are_edges_and_a_cycle_is_named(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.sub import b\n    return b\n")
    (package / "sub" / "b.py").write_text("from .. import c\n")
    (package / "c.py").write_text("import os\n\n\ndef g():\n    from .a import f\n    return f\n")
    (package / "d.py").write_text("from pkg import a\n")

    graph = import_graph(tmp_path, "pkg")

    assert graph["pkg.a"] == {"pkg.sub": "pkg/a.py:2", "pkg.sub.b": "pkg/a.py:2"}
    assert graph["pkg.sub.b"] == {"pkg": "pkg/sub/b.py:1", "pkg.c": "pkg/sub/b.py:1"}
    assert graph["pkg.c"] == {"pkg.a": "pkg/c.py:5"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]
    assert described(graph, cycles(graph)[0]) == (
        "pkg.a -> pkg.sub.b -> pkg.c -> pkg.a\n"
        "    pkg.a imports pkg.sub.b at pkg/a.py:2\n"
        "    pkg.sub.b imports pkg.c at pkg/sub/b.py:1\n"
        "    pkg.c imports pkg.a at pkg/c.py:5"
    )
