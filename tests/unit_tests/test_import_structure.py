"""The import structure of the three packages: no import circles, lazy (in-function) imports included.

A circle means a lower module reaches up into a higher one (the loop into the calibration runner, the model
loader into the registry that re-exports it...): what both need belongs in a module below both. The graph is
built from the source with :mod:`ast`, so imports inside functions and under ``TYPE_CHECKING`` count too. A
package's ``__init__`` (its public face, which re-exports names lazily) is left out, as re-exports are not
layering.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from room_walk import ROOMS  # noqa: E402  (the rooms, lowest first; a call's walk through them: test_room_walk.py)

sys.path.pop(0)

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("active_rag", "langchain_active_rag", "llamaindex_active_rag")


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (relative imports resolved; ``from pkg import
    mod`` counts as importing ``pkg.mod``; ``import a.b.c`` of a name that is not a module as its module)."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()

    def add(target: str) -> None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                prefix = ".".join(base[: len(base) - node.level + 1])
                module = f"{prefix}.{node.module}" if node.module else prefix
            else:
                module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                add(full if full in known else module)
    return out


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {
        name: {t for t in _imports(name, path, known) if known[t].name != "__init__.py"}
        for name, path in known.items()
        if path.name != "__init__.py"
    }


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or ``None`` (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_graph_sees_the_packages_and_lazy_imports() -> None:
    graph = _graph()
    assert {"active_rag.engine.loop", "active_rag.cli.commands", "langchain_active_rag.chain", "llamaindex_active_rag.query_engine"} <= set(graph)
    assert "active_rag.engine.loop" in graph["active_rag.engine.calibration"]  # a module-level import
    assert "active_rag.decoding.many_questions" in graph["active_rag.engine.loop"]  # imported inside ActiveRAG.run_batch
    assert "active_rag.evaluation.cli" in graph["active_rag.cli.commands"]  # imported inside build_parser


def test_no_import_circles() -> None:
    cycle = _find_cycle(_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or []) + (
        ". Move what the modules share into a module below both."
    )


def test_the_circle_check_finds_a_circle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_model_specs_and_the_model_cache_are_leaves() -> None:
    """The registry is a facade over them: they import no other module of the project but its errors."""
    graph = _graph()
    for leaf in ("active_rag.models.model_specs", "active_rag.models.model_cache"):
        assert graph[leaf] <= {"active_rag.errors"}, (leaf, graph[leaf])
    importers = sorted(name for name, targets in graph.items() if "active_rag.models.registry" in targets)
    assert importers == ["active_rag.cli.commands"], importers  # nothing below the command line uses the facade


def test_the_packages_do_not_import_the_research_scripts() -> None:
    """research/ holds one-off evidence scripts (research/README.md): the packages never import them, so the wheel,
    which does not ship research/, imports whole."""
    importers = []
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            importers += [str(path.relative_to(ROOT)) for n in names if n.split(".")[0] == "research"]
    assert not importers, importers
    assert (ROOT / "research" / "linked_recall.py").is_file()  # the scripts are there, beside the packages




def _room(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "active_rag":
        return len(ROOMS)  # the adapters
    name = parts[1] if len(parts) > 1 and (ROOT / "active_rag" / parts[1] / "__init__.py").exists() else "top"
    return next(i for i, names in enumerate(ROOMS) if name in names)


def test_every_room_of_active_rag_is_in_a_floor_and_no_import_climbs_back_up() -> None:
    packages = {p.name for p in (ROOT / "active_rag").iterdir() if (p / "__init__.py").exists()}
    assert packages <= {name for names in ROOMS for name in names}, "a new subpackage needs its floor in ROOMS"
    climbs = [f"{a} -> {b}" for a, targets in _graph().items() for b in sorted(targets)
              if a != "active_rag" and _room(a) < _room(b)]
    assert climbs == [], "imports that climb back up: " + "; ".join(climbs)
