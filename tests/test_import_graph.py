"""No import cycles among the modules of the package: cxsim/ and its subpackages, envs/,
agents/ and experiments/.

The import graph is read from the source with ``ast``: every ``import`` and ``from ... import``
counts, at module level or inside a function (a lazy import is still a dependency: it runs
when the function does), except those under ``if TYPE_CHECKING:`` (annotations only, never
run). Importing ``a.b.c`` runs the packages ``a`` and ``a.b`` too, so they count as well, except
the importing module's own packages: they have started running before it does. A cycle is a
strongly connected component of two or more modules, or a module that imports itself. An entry
point imports its helper and page modules; they take plain results, their own small
dataclasses, or the entry point's Config under ``if TYPE_CHECKING:`` only, never a runtime
import back; a piece two modules share lives in the lower one, or in a small module below both
(the strategies' scripted oracle, the value heads and their pools, the loss modes' entry type).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = (
    "conformance",
    "diagnostics",
    "lab",
    "paper_tables",
    "pipeline",
    "report",
    "strategies",
    "studies",
)
PACKAGES = {
    "cxsim": ROOT / "cxsim",
    **{f"cxsim.{sub}": ROOT / "cxsim" / sub for sub in SUBPACKAGES},
    "cxsim.envs": ROOT / "envs",
    "cxsim.agents": ROOT / "agents",
    "cxsim.experiments": ROOT / "experiments",
}
"""Every package of the distribution (pyproject.toml's ``packages``) and its folder."""


def module_files(packages: dict[str, Path]) -> dict[str, Path]:
    """Module name -> file, for every ``.py`` of each package folder (``__init__``: the package)."""
    found = {}
    for package, folder in packages.items():
        for path in sorted(folder.glob("*.py")):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (their ``else`` runs)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                inside |= {id(n) for n in ast.walk(statement)}
    return inside


def imports_of(path: Path, module: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` (at ``path``) imports when it runs."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = type_checking_nodes(tree)
    is_package = path.stem == "__init__"
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                anchor = parts if is_package else parts[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names}
            names |= submodules
            if not submodules <= known:  # a name defined in ``base`` itself, not a module
                names.add(base)
    found = set()
    for name in names:  # `import a.b.c` also runs a.b and a
        parts = name.split(".")
        found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    parts = module.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts))}  # running before the module
    return (found & known) - own - {module} | ({module} if module in names else set())


def import_graph(packages: dict[str, Path]) -> dict[str, set[str]]:
    files = module_files(packages)
    known = set(files)
    return {name: imports_of(path, name, known) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's cycles: strongly connected components of 2+ nodes and self-loops, each
    sorted, in sorted order (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def test_the_cycle_finder_finds_cycles_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"f"}}
    assert cycles(graph) == [["a", "b", "c"], ["f"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert cycles({"x": {"y"}, "y": {"x", "z"}, "z": {"w"}, "w": {"z"}}) == [["w", "z"], ["x", "y"]]


def test_imports_are_read_as_they_run(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text(
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "from . import b\n"
        "if TYPE_CHECKING:\n"
        "    from pkg import c\n"
        "def later():\n"
        "    import pkg.d\n"
    )
    for name in ("b", "c", "d"):
        (package / f"{name}.py").write_text("")
    (package / "b.py").write_text("from .a import later\n")
    (package / "__init__.py").write_text("from pkg import c\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "__init__.py").write_text("")
    (tmp_path / "other" / "e.py").write_text("def later():\n    from pkg.b import later\n")
    graph = import_graph({"pkg": package, "other": tmp_path / "other"})
    assert graph["pkg.a"] == {"pkg.b", "pkg.d"}  # not c: annotations only; pkg runs already
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["other.e"] == {"pkg", "pkg.b"}  # another package's __init__ runs first
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


def test_no_module_of_the_package_lies_on_an_import_cycle():
    graph = import_graph(PACKAGES)
    assert "cxsim.studies.runner" in graph and "cxsim.studies.study" in graph
    assert {"cxsim.ppo", "cxsim.envs.key_recall", "cxsim.agents.critic"} <= set(graph)
    assert "cxsim.studies.spec" in graph["cxsim.studies.runner"]  # the graph has edges
    for entry, helper in (
        ("cxsim.lab.lab", "cxsim.lab.lab_studies"),
        ("cxsim.pipeline.run", "cxsim.report.report"),
        ("cxsim.pipeline.train", "cxsim.pipeline.training_run"),
    ):
        # entry points import their helpers lazily: those edges are read too
        assert helper in graph[entry]
    lazy = {  # imports inside functions, in the library itself
        "cxsim.critics": "cxsim.agents.critic",  # build_critic
        "cxsim.strategies.rollout_agents": "cxsim.strategies.scripted_oracle",
        "cxsim.value_heads": "cxsim.value_pools",
    }
    for module, imported in lazy.items():
        assert imported in graph[module], (module, imported)
    found = cycles(graph)
    assert found == [], (
        f"import cycles {found}: move what both modules need to the lower one (or a small "
        "module of its own), or import it under `if TYPE_CHECKING:` if only annotations use it"
    )


def test_the_library_never_imports_the_benchmarks_folder():
    """experiments/ holds the benchmarks only (issue 38): the library (the study engine, the
    pipeline and every other package) imports none of it; cxsim/cli.py names its modules as
    strings and imports them when a benchmark runs."""
    graph = import_graph(PACKAGES)
    up = sorted(
        f"{module} -> {imported}"
        for module, imports in graph.items()
        if not module.startswith("cxsim.experiments")
        for imported in imports
        if imported.startswith("cxsim.experiments")
    )
    assert up == [], f"library modules importing experiments/: {up}"
