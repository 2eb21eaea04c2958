"""No import cycles between torchpace's packages: each package can be read, tested and
changed knowing only the packages below it (report renders plain data and does not import
the doctor; capture does not import the verbs that use it)."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import ROOT

SRC = ROOT / "src"
PACKAGE = SRC / "torchpace"
# The floors of the house, lowest first (docs/ARCHITECTURE.md): a package imports only
# packages on floors below its own. Every package and top-level module is on one.
FLOORS: list[set[str]] = [
    {
        "catalog",
        "atomic",
        "exit_codes",
        "run_files",
        "output_paths",
        "printable",
        "_version",
        "stats",
        "contention",
        "frameworks",
    },  # leaves: stdlib only
    {"trace", "env"},  # env/peak.py caches the measured peak with atomic's writer
    {"facts", "lint", "distributed"},
    {"knobs", "report"},
    {"capture"},
    {"doctor", "run", "apply"},
    {"tune", "launch", "compare", "code_pages"},
    {"cli", "__init__"},
    {"__main__"},
]
IMPORTED_PACKAGES = ("doctor", "report", "trace", "capture", "knobs", "facts")
# Edges known to close a cycle, each with why, left to the work that owns them. An entry
# must be removed once its edge is gone (a test says so), so that the list only shrinks.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """The node a module belongs to: its top-level package (or module) under torchpace."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _runs(node: ast.stmt) -> bool:
    """False for ``if TYPE_CHECKING:`` blocks, whose imports never execute."""
    test = node.test if isinstance(node, ast.If) else None
    return not (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imported_modules(path: Path, module: str, text: str | None = None) -> set[str]:
    """torchpace modules imported anywhere in the file (inside functions too: a lazy import
    is still a dependency), except under ``if TYPE_CHECKING:``; ``text``: the file's source
    when it is not read from ``path``."""
    out: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and not _runs(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:  # `from torchpace import catalog` imports a module
                sub = f"{base}.{a.name}"
                is_module = (SRC / Path(*sub.split("."))).with_suffix(".py").is_file() or (
                    SRC / Path(*sub.split("."))
                ).is_dir()
                out.add(sub if is_module else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text() if text is None else text, str(path)))
    named = {m for m in out if m == "torchpace" or m.startswith("torchpace.")}
    return named | packages_run_on_the_way(named, module)


def packages_run_on_the_way(modules: set[str], importer: str) -> set[str]:
    """The ``__init__`` of every package above an imported module runs too (importing
    ``torchpace.doctor.checks.base`` runs ``torchpace/doctor/__init__.py`` and
    ``torchpace/doctor/checks/__init__.py``): those packages are imported as well. The root
    package is left out (Python runs it before any submodule, for every import alike:
    test_the_package_face_runs_nothing_below_it holds what it costs), and so are the
    importer's own packages, already running when it runs."""
    own = set(_parents(importer)) | {importer}
    return {p for m in modules for p in _parents(m) if p != "torchpace" and p not in own}


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def layer_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        src = layer(module)
        graph.setdefault(src, set())
        for target in imported_modules(path, module):
            dst = layer(target)
            if dst != src:
                graph[src].add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}  # "open" while on the current path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_packages_import_each_other_without_cycles():
    graph = layer_graph()
    assert {"capture", "trace", "report"} <= graph["doctor"]  # the graph was read at all
    for src, dst in KNOWN_CYCLE_EDGES:
        graph[src].discard(dst)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between packages: " + " -> ".join(cycle)


def floor_of(node: str) -> int:
    for number, floor in enumerate(FLOORS):
        if node in floor:
            return number
    raise AssertionError(f"{node} is on no floor: add it to FLOORS and docs/ARCHITECTURE.md")


def test_no_import_runs_back_up_a_floor():
    """Each package imports only packages on lower floors (a floor's packages do not import
    each other either): the one-way flow cli -> verbs -> capture -> facts/knobs -> trace."""
    graph = layer_graph()
    upward = [
        f"{src} (floor {floor_of(src) + 1}) imports {dst} (floor {floor_of(dst) + 1})"
        for src, targets in graph.items()
        for dst in targets
        if floor_of(dst) >= floor_of(src)
    ]
    assert not upward, "imports that do not go down a floor:\n" + "\n".join(sorted(upward))


def test_no_files_import_each_other_in_a_loop():
    """Within a package too: two modules that import each other (even lazily, inside a
    function) can be read only together (tune/session.py took tune/command.py's default
    back from it: the default lives with the typed options now)."""
    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        graph[module] = imported_modules(path, module) - {module}
    cycle = find_cycle(graph)
    assert cycle is None, "modules importing each other: " + " -> ".join(cycle)


def test_known_cycle_edges_still_exist():
    graph = layer_graph()
    gone = [edge for edge in KNOWN_CYCLE_EDGES if edge[1] not in graph.get(edge[0], ())]
    assert not gone, f"no longer imported, remove from KNOWN_CYCLE_EDGES: {gone}"


def test_report_renders_plain_data_without_the_doctor():
    graph = layer_graph()
    assert "report" in graph["doctor"]  # the doctor calls the report...
    assert "doctor" not in graph["report"]  # ...which only reads the doctor's dict


def test_find_cycle_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_imports_first_in_a_fresh_interpreter():
    """A cycle between modules shows as an ImportError only for some import orders: each
    module is imported first, with every torchpace module forgotten before it."""
    modules = sorted(
        module_name(p) for package in IMPORTED_PACKAGES for p in (PACKAGE / package).rglob("*.py")
    )
    script = textwrap.dedent(
        """
        import importlib, sys
        failed = []
        for name in sys.argv[1:]:
            for loaded in [m for m in sys.modules if m.split(".")[0] == "torchpace"]:
                del sys.modules[loaded]
            try:
                importlib.import_module(name)
            except Exception as e:
                failed.append(f"{name}: {type(e).__name__}: {e}")
        print("\\n".join(failed))
        sys.exit(1 if failed else 0)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *modules],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_import_of_the_root_package_is_an_import_of_its_face():
    """``from torchpace import __version__`` imports torchpace/__init__.py (floor 8), which
    imports apply: a package below reads the version from torchpace._version instead."""
    text = "from torchpace import __version__, catalog\nimport torchpace.doctor.checks.base\n"
    found = imported_modules(PACKAGE / "doctor" / "x.py", "torchpace.doctor.x", text)
    assert {"torchpace", "torchpace.catalog"} <= found
    assert layer("torchpace") == "__init__" and floor_of("__init__") > floor_of("doctor")
    # the package above an imported module runs too; the importer's own packages do not count
    assert "torchpace.doctor.checks" in found and "torchpace.doctor" not in found
    assert packages_run_on_the_way({"torchpace.a.b.c"}, "torchpace.x") == {
        "torchpace.a",
        "torchpace.a.b",
    }


def test_the_package_face_runs_nothing_below_it():
    """Every import of a torchpace module runs torchpace/__init__.py first; it imports apply
    eagerly (the name must not be shadowed by the submodule) and nothing else: importing a
    ground-floor module loads no other torchpace module than those two."""
    script = (
        "import sys, torchpace.catalog\n"
        "print(*sorted(m for m in sys.modules if m.split('.')[0] == 'torchpace'))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["torchpace", "torchpace.apply", "torchpace.catalog"]
