"""The package's modules import each other without a cycle.

A static check over ``ast``: every ``import`` in a module counts, at module level or
inside a function (a lazy import is still a dependency), except imports under
``if TYPE_CHECKING:`` (annotations only). The implicit import of a parent package
does not count; ``from .. import x`` counts as an import of the module ``x`` when
there is one, else of the package.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import blockbuster

PACKAGE = Path(blockbuster.__file__).parent


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["blockbuster", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING"


def _imports(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()

    def visit(node):
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in mods:
                    out.add(sub)
                elif target in mods:
                    out.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    out.discard(name)
    return out


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    mods = _modules()
    return {name: frozenset(_imports(name, path, mods)) for name, path in mods.items()}


def import_graph() -> dict[str, frozenset[str]]:
    """Module -> the package modules it imports (built once per test session)."""
    return dict(_graph())


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and "blockbuster.ir.expr" in graph   # the scan saw the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    graph = import_graph()
    graph["blockbuster.ir.index"] = graph["blockbuster.ir.index"] | {"blockbuster.ir.expr"}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1]
    assert {"blockbuster.ir.index", "blockbuster.ir.expr"} <= set(cycle)


def test_the_graph_sees_lazy_and_relative_imports():
    graph = import_graph()
    assert "blockbuster.ir.expr" in graph["blockbuster.ir.program"]          # from .expr
    assert "blockbuster.cost.model" in graph["blockbuster.rewrite.guards"]   # in a function


#: The command line: ``cli.py`` (parsing, exit statuses) and its modules, one per
#: subcommand (``cli_run``...) and what they share (``cli_common``, ``cli_args``).
COMMAND_LINE = {"blockbuster.cli", "blockbuster.__main__", "blockbuster.cli_args",
                "blockbuster.cli_common", "blockbuster.cli_run", "blockbuster.cli_show",
                "blockbuster.cli_import", "blockbuster.cli_lists", "blockbuster.cli_rules"}

#: Entry points that sit above the public API and may use it as any user does.
ABOVE_THE_API = {"blockbuster.cli", "blockbuster.__main__", "blockbuster.cli_run",
                 "blockbuster.cli_show", "blockbuster.cli_import"}


def test_modules_below_the_facade_do_not_import_it():
    """``import blockbuster`` inside the package would tie a module to the whole API
    (``report.py`` once did); only the command line sits above the API."""
    graph = import_graph()
    users = sorted(m for m, deps in graph.items() if "blockbuster" in deps)
    assert set(users) <= ABOVE_THE_API, users
    assert ABOVE_THE_API <= COMMAND_LINE


def test_only_the_command_line_imports_its_modules():
    """The subcommands' modules are the command line's own: no module below it (and
    no new ``cli_*`` module left out of :data:`COMMAND_LINE`) imports them."""
    graph = import_graph()
    cli = {m for m in graph if m.split(".")[-1].startswith("cli") or m.endswith("__main__")}
    assert cli == COMMAND_LINE, sorted(cli ^ COMMAND_LINE)
    users = sorted(m for m, deps in graph.items() if deps & cli and m not in COMMAND_LINE)
    assert users == [], users


# --- no module reaches into another module's private names ---------------------------

REPO = PACKAGE.parent
SOURCES = [PACKAGE, *(p for p in (REPO / "plugins").glob("*/*") if (p / "__init__.py").is_file())]


def private_imports(path: Path) -> list[str]:
    """``from x import _name`` and ``x._name`` on an imported module, in one file."""
    tree = ast.parse(path.read_text(), str(path))
    found, modules = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno}: imports {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update((a.asname or a.name).split(".")[0] for a in node.names)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            found.append(f"{path.name}:{node.lineno}: uses {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names():
    files = [p for root in SOURCES for p in root.rglob("*.py")]
    assert len(files) > 50
    found = [hit for p in files for hit in private_imports(p)]
    assert found == []


def test_private_import_finder_sees_both_forms(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from .actions import _helper\nfrom . import subst\nsubst._fresh('k', set())\n")
    assert len(private_imports(probe)) == 2
