"""Imports point one way: core `topo` < `planners` < `views` < `launcher` < the CLI, and no module
imports itself back through others. Read from the source with ast, so an import inside a function
(or under `if TYPE_CHECKING:`) counts as much as one at the top: deferring an import hides a back
arrow or a circle, it does not remove it.

The packages may be installed under `topo.` later (`topo.planners`, `topo.views`, `topo.launcher`,
`topo.cli`): both spellings name the same layer, in file paths and in import statements.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("topo", "planners", "views", "launcher", "topo_cli")  # lowest first
RENAMED = {"planners": "planners", "views": "views", "launcher": "launcher", "cli": "topo_cli"}  # topo.X: today
FACADE = "topo"  # topo/__init__.py: the public names, re-exported lazily from any layer
ENTRY = "topo.__main__"  # `python -m topo` runs the CLI

# Known back arrows and circles: none. An entry here would name a module and why it may.
ALLOWED_BACK: set[tuple[str, str]] = set()
ALLOWED_CYCLES: set[frozenset[str]] = set()


def canonical(name: str) -> str:
    """A module's name as spelled today: `topo.planners.core` is `planners.core`, `topo.cli.run`
    is `topo_cli.run`."""
    parts = name.split(".")
    if parts[0] == "topo" and len(parts) > 1 and parts[1] in RENAMED:
        return ".".join([RENAMED[parts[1]], *parts[2:]])
    return name


def module_files(repo: Path) -> dict[str, Path]:
    """Every product module, by canonical name: the top-level folders of today, or the same
    folders under topo/."""
    found = {}
    for top in ("topo", *LAYERS[1:]):
        folder = repo / top
        if not (folder / "__init__.py").exists():
            continue
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(repo).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[canonical(".".join(parts))] = path
    return found


def layer_of(name: str) -> str | None:
    """The layer of a canonical module name; None outside topo."""
    top = name.split(".")[0]
    if top in LAYERS[1:]:
        return top
    if top != "topo":
        return None
    return "topo_cli" if name == ENTRY else "topo"


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """(imported module's canonical name, line) for each import anywhere in the file of module
    ``name``; `from pkg import sub` names the submodule when there is one. Relative imports count
    from the folders."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update((canonical(alias.name), node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                base = ".".join(anchor[:len(anchor) - (node.level - 1)] + ([base] if base else []))
            for alias in node.names:
                sub = canonical(f"{base}.{alias.name}")
                found.add((sub if sub in modules else canonical(base), node.lineno))
    return sorted(found, key=lambda f: (f[1], f[0]))


def back_arrows(modules: dict[str, Path]) -> list[tuple[str, str, int, str]]:
    """(importer, imported, line, imported layer) for each import of a higher layer."""
    out = []
    for name, path in modules.items():
        if name == FACADE:
            continue
        mine = LAYERS.index(layer_of(name))
        for target, line in imports_of(name, path, modules):
            theirs = layer_of(target)
            if theirs is not None and LAYERS.index(theirs) > mine:
                out.append((name, target, line, theirs))
    return out


def cycles(modules: dict[str, Path]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module in the graph of imports (Tarjan's
    algorithm)."""
    graph = {name: sorted({t for t, _ in imports_of(name, path, modules) if t in modules and t != name})
             for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


# ---- the product -------------------------------------------------------------------------------
MODULES = module_files(REPO)


def test_every_product_folder_is_read():
    layers = {layer_of(name) for name in MODULES}
    assert layers == set(LAYERS), layers
    assert len(MODULES) > 50


def test_no_module_imports_a_higher_layer():
    found = [(a, b, line, layer) for a, b, line, layer in back_arrows(MODULES) if (a, layer) not in ALLOWED_BACK]
    assert not found, "\n".join(f"{MODULES[a].relative_to(REPO)}:{line} imports {b} (layer {layer})"
                                for a, b, line, layer in found)


def test_no_import_cycle():
    found = [c for c in cycles(MODULES) if c not in ALLOWED_CYCLES]
    assert not found, "cycles of module-level imports: " + "; ".join(" -> ".join(sorted(c)) for c in found)


def test_the_allow_lists_hold_only_what_still_happens():
    """An entry fixed elsewhere must leave the list, so it cannot hide a new offender."""
    back = {(a, layer) for a, _, _, layer in back_arrows(MODULES)}
    assert ALLOWED_BACK <= back, ALLOWED_BACK - back
    assert ALLOWED_CYCLES <= set(cycles(MODULES)), ALLOWED_CYCLES - set(cycles(MODULES))


# ---- the checker itself, on a made-up tree --------------------------------------------------------
SPELLINGS = {
    # imports of the higher packages, and where their folders are
    "today": ({"planners": "planners", "views": "views", "cli": "topo_cli"}, ""),
    "renamed": ({"planners": "topo.planners", "views": "topo.views", "cli": "topo.cli"}, ""),
    "moved": ({"planners": "topo.planners", "views": "topo.views", "cli": "topo.cli"}, "topo/"),
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_checker_finds_a_back_arrow_inside_a_function_and_a_cycle(tmp_path, spelling):
    names, under = SPELLINGS[spelling]
    cli_folder = "topo/cli" if under else "topo_cli"
    files = {
        "topo/__init__.py": f"def late():\n    import {names['cli']}\n",  # the facade may
        "topo/__main__.py": f"from {names['cli']} import main\n",  # the entry point is the CLI's
        "topo/model.py": "import os\n",
        "topo/cpuset.py": f"def plan():\n    from {names['planners']} import core\n",
        "topo/a.py": "from topo import b\n",
        "topo/b.py": "from . import a\n",
        "topo/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from topo import c2\n",
        "topo/c2.py": "def late():\n    import topo.c\n",
        f"{under}planners/__init__.py": "",
        f"{under}planners/core.py": "import topo.model\n",
        f"{under}views/__init__.py": f"from {names['planners']} import core\n",
        f"{cli_folder}/__init__.py": f"import {names['views']}\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = module_files(tmp_path)
    assert {"planners.core", "views", "topo_cli", "topo.__main__"} <= set(modules)
    assert [(a, b, layer) for a, b, _, layer in back_arrows(modules)] == [("topo.cpuset", "planners.core", "planners")]
    assert sorted(map(sorted, cycles(modules))) == [["topo.a", "topo.b"], ["topo.c", "topo.c2"]]
