"""The layering of ``heron/`` as a contract: which package may import which (CONTRIBUTING.md, "What goes
where"), read from the source with ``ast``, so that a change that breaks it fails here, naming the
import.

From the top: the faces (``heron.cli``, ``heron.api``, ...), the algorithms (``heron.algos``), the run
(``heron.runtime``), the options (``heron.config``), the fast paths (``heron.accel``), the
reinforcement-learning pieces (``heron.rl``) beside the environments (``heron.envs``), the operations
(``heron.ops``) and ``heron.errors``. A module imports its own layer or the layers below it, never
above; ``heron.rl`` and ``heron.envs`` do not import each other. Every import counts, at the top of a
module or inside a function, but for those under ``if TYPE_CHECKING:``, which never run.

Two rules refine it:

* the algorithms reach the fast paths through the step builder (``heron.accel.step``) and the acting
  objects (``heron.accel.acting``) only;
* a hand-written step (``heron.accel.handwritten.<algo>``) is a fast path of one algorithm's readable
  step: it imports that algorithm's ``losses``, ``networks`` and ``distributions``, the values it
  mirrors, and nothing else of the algorithms.

And no module imports another that imports it back, directly or round a longer circle; no module of
an algorithm runs past ``ALGO_MODULE_LINES`` lines (one that does holds more than one part of the
algorithm: split it by what each part is)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "heron"

FACES = {
    "heron",
    "heron.__main__",
    "heron._commit",
    "heron.api",
    "heron.bench",
    "heron.checkenv",
    "heron.cli",
    "heron.export",
    "heron.plot",
    "heron.registry",
    "heron.tune",
}
# (layer, its modules' prefix); the lower the rank, the lower the layer; equal ranks are siblings
LAYERS = [
    ("algos", "heron.algos", 6),
    ("runtime", "heron.runtime", 5),
    ("config", "heron.config", 4),
    ("accel", "heron.accel", 3),
    ("rl", "heron.rl", 2),
    ("envs", "heron.envs", 2),
    ("ops", "heron.ops", 1),
    ("errors", "heron.errors", 0),
]
ALGO_ENTRIES = ("heron.accel.step", "heron.accel.acting")  # the algorithms' way into the fast paths
HANDWRITTEN = "heron.accel.handwritten."
ALGO_MODULE_LINES = 350


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, known: set[str], root: Path = ROOT) -> list[tuple[str, int]]:
    """(heron module imported, line) for every import in the file that runs: a ``from pkg import name``
    of a submodule names the submodule; of anything else, the module it comes from."""
    tree = ast.parse(path.read_text())
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "heron"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "heron":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.append((sub if sub in known else source, node.lineno))
    return found


def layer_of(module: str) -> tuple[str, int] | None:
    """(layer, rank) of a module; None for the faces, which may import anything."""
    if module in FACES:
        return None
    for layer, prefix, rank in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return layer, rank
    raise AssertionError(f"{module} is in no layer: add it to the contract in tests/test_layers.py")


def violation(importer: str, imported: str) -> str | None:
    """Why ``importer`` may not import ``imported``, or None."""
    if imported in FACES:
        return None if importer in FACES else "a face (nothing below the faces imports them)"
    mine, theirs = layer_of(importer), layer_of(imported)
    if mine is None:  # a face
        return None
    (layer, rank), (other, other_rank) = mine, theirs
    if importer.startswith(HANDWRITTEN) and other == "algos":
        algo = importer[len(HANDWRITTEN) :]
        allowed = {f"heron.algos.{algo}.{part}" for part in ("losses", "networks", "distributions")}
        return (
            None
            if imported in allowed
            else (
                f"a hand-written step imports only its algorithm's losses, networks and distributions "
                f"({', '.join(sorted(allowed))})"
            )
        )
    if layer == "algos" and other == "accel" and imported not in ALGO_ENTRIES:
        return f"the algorithms reach the fast paths through {' and '.join(ALGO_ENTRIES)} only"
    if layer == other:
        return None
    if other_rank > rank:
        return f"{other} is above {layer}"
    if other_rank == rank:
        return f"{layer} and {other} do not import each other"
    return None


def graph() -> dict[str, list[tuple[str, int]]]:
    mods = modules()
    known = set(mods)
    return {name: imports(path, known) for name, path in mods.items()}


def test_no_algorithm_module_runs_long():
    long = {
        name: n
        for name, path in modules().items()
        if name.startswith("heron.algos.") and (n := len(path.read_text().splitlines())) > ALGO_MODULE_LINES
    }
    assert not long, f"split by what each part is (networks, distributions, acting, learning): {long}"


def test_every_module_is_in_a_layer():
    for name in modules():
        layer_of(name)  # raises for a module outside the contract


def test_imports_follow_the_layers():
    broken = []
    for importer, found in graph().items():
        for imported, line in found:
            why = violation(importer, imported)
            if why is not None:
                broken.append(f"{importer} (line {line}) imports {imported}: {why}")
    assert not broken, "\n".join(broken)


def test_no_module_imports_one_that_imports_it_back():
    edges = {m: sorted({i for i, _ in found if i != m}) for m, found in graph().items()}
    # Tarjan's strongly connected components: any with two or more modules is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert not circles, f"modules that import each other: {circles}"


@pytest.mark.parametrize(
    "importer, imported, allowed",
    [
        ("heron.rl.nets", "heron.accel.graphs", False),  # a layer above
        ("heron.rl.buffers", "heron.envs.step", False),  # siblings
        ("heron.algos.sac.train", "heron.accel.handwritten.sac", False),  # not through the builder
        ("heron.algos.sac.train", "heron.accel.step", True),
        ("heron.accel.handwritten.sac", "heron.algos.sac.losses", True),
        ("heron.accel.handwritten.sac", "heron.algos.td3.losses", False),  # another algorithm's
        ("heron.accel.handwritten.sac", "heron.algos.sac.train", False),
        ("heron.runtime.run", "heron.api", False),  # a face
        ("heron.cli", "heron.accel.handwritten.sac", True),
    ],
)
def test_the_contract_can_fail(importer, imported, allowed):
    assert (violation(importer, imported) is None) is allowed


def test_imports_are_read_from_function_bodies_and_not_from_type_checking_blocks(tmp_path):
    src = tmp_path / "heron" / "rl" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from heron.runtime.run import Run\n"
        "def f():\n    from heron.accel import graphs\n"
    )
    found = imports(src, {"heron.accel.graphs"}, root=tmp_path)
    assert found == [("heron.accel.graphs", 5)]
