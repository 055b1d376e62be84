"""The layers of dfit_nb: no import cycles, and no reaching into another package's private names.

Read from the source (``ast``), so an import placed inside a function counts as much as one at the top of a
module: a cycle held apart only by function-level imports is still a cycle of the design.

The packages are the subpackages ``dfit_nb.sim``, ``.capture``, ``.events``, ``.views`` and ``.widgets`` (a
module of a subpackage may import the private names and modules of its own subpackage, nested ones included),
and each top-level module (``dfit_nb.cli``, ``dfit_nb.report``, ...), which is a package of its own. The
top-level private modules (``dfit_nb._atomic``, ``dfit_nb._files``, ...) and the modules of the runtime package
(``dfit_nb._runtime.exported``, ``dfit_nb._runtime.padding``, ...) are the layer several packages share: any module
of dfit_nb may import them, but not the private names inside them (a private name read as an attribute of
an imported module, ``_files._sibling``, counts as importing it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dfit_nb"
SUBPACKAGES = ("sim", "capture", "events", "examples", "views", "widgets", "_runtime")


def _module_name(path: Path) -> str:
    parts = ["dfit_nb", *path.relative_to(PKG).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def owner(module: str) -> str:
    """The package ``module`` belongs to: its subpackage, or itself for a top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in SUBPACKAGES else module


def imports(module: str) -> list[tuple[str, str | None, int]]:
    """``(target module, imported name or None, line)`` for every import of a dfit_nb module in ``module``,
    wherever it stands (module level, functions, branches); a name that is itself a module is the target."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name in MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "dfit_nb":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((sub, None, node.lineno) if sub in MODULES else (target, a.name, node.lineno))
    return out


def attribute_uses(module: str) -> list[tuple[str, str, int]]:
    """``(target module, attribute, line)`` for every private attribute read through a name that an import in
    ``module`` binds to a dfit_nb module (``_files._sibling`` after ``from .. import _files``): reaching into a
    module's private names that way is the same as importing them."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
        else:
            continue
        for a in node.names:
            if f"{target}.{a.name}" in MODULES:
                bound[a.asname or a.name] = f"{target}.{a.name}"
    return [(bound[n.value.id], n.attr, n.lineno) for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound
            and _private(n.attr)]


def graph() -> dict[str, set[str]]:
    """Module -> the dfit_nb modules it imports."""
    return {m: {t for t, _, _ in imports(m) if t != m and t in MODULES} for m in MODULES}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
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
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def private_imports(module: str, found: list[tuple[str, str | None, int]] | None = None) -> list[str]:
    """The imports in ``module`` (default: read from its source) of another package's private module or
    private name."""
    bad = []
    for target, name, line in (imports(module) + attribute_uses(module)) if found is None else found:
        parts = target.split(".")
        # dfit_nb._x and dfit_nb._runtime.x: the shared runtime layer
        runtime = _private(parts[1]) and (len(parts) == 2 or (parts[1] == "_runtime" and not _private(parts[2])))
        if any(_private(p) for p in parts[1:]) and not runtime and owner(target) != owner(module):
            bad.append(f"{module}:{line} imports the private module {target}")
        if name is not None and _private(name) and owner(target) != owner(module):
            bad.append(f"{module}:{line} imports the private name {target}.{name}")
    return bad


def test_the_checker_sees_cycles_and_private_imports():
    """The test's own logic on small graphs and on names it must flag or let pass."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert owner("dfit_nb.sim.policy") == owner("dfit_nb.sim._cost") == "dfit_nb.sim"
    assert owner("dfit_nb.capture.costs._shapes") == "dfit_nb.capture"
    assert owner("dfit_nb.cli") == "dfit_nb.cli" != owner("dfit_nb._files")
    flagged = [("dfit_nb.sim._replay", "replay", 1), ("dfit_nb.sim", "_replay", 2), ("dfit_nb._files", "_check", 3)]
    assert len(private_imports("dfit_nb.report", flagged)) == 3
    allowed = [("dfit_nb._atomic", "atomic_file", 1), ("dfit_nb.sim", "replay", 2),
               ("dfit_nb._runtime.padding", "pack", 3), ("dfit_nb._runtime", "exported", 4)]
    assert private_imports("dfit_nb.report", allowed) == []
    assert private_imports("dfit_nb.sim.policy", [("dfit_nb.sim._cost", "_attrs", 1)]) == []
    # a private name read as an attribute of an imported module counts as importing it
    assert ("dfit_nb._runtime.padding", "_pack", 1) in [(t, a, 1) for t, a, _ in
                                                        _uses("from .._runtime import padding\npadding._pack(1)\n")]
    # imports inside functions count: the lazy views of dfit_nb/__init__.py are found by name
    assert any(t == "dfit_nb.magics" for t, _, _ in imports("dfit_nb"))


def _uses(source: str) -> list[tuple[str, str, int]]:
    """:func:`attribute_uses` of ``source`` read as if it were ``dfit_nb.sim._example``."""
    MODULES["dfit_nb.sim._example"] = _Source(source)
    try:
        return attribute_uses("dfit_nb.sim._example")
    finally:
        del MODULES["dfit_nb.sim._example"]


class _Source:
    """A stand-in for a module's path: its name and its text."""

    name = "_example.py"

    def __init__(self, text: str) -> None:
        self.text = text

    def read_text(self) -> str:
        return self.text

    def __str__(self) -> str:
        return "<example>"


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, f"import cycles among dfit_nb modules (imports inside functions count): {found}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_of_another_package(module):
    bad = private_imports(module)
    assert not bad, bad
