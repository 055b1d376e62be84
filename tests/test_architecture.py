"""The import direction of ARCHITECTURE.md: lower floors never import higher ones."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dfit_nb"
FORBIDDEN = {
    "capture": {"altair", "ipywidgets", "anywidget", "IPython", "dfit_nb.sim", "dfit_nb.views",
                "dfit_nb.widgets", "dfit_nb.magics"},
    "events": {"altair", "ipywidgets", "anywidget", "IPython", "dfit_nb.sim", "dfit_nb.views", "dfit_nb.widgets",
               "dfit_nb.magics"},
    "widgets": {"dfit_nb.magics"},
    "views": {"ipywidgets", "anywidget", "IPython", "dfit_nb.widgets", "dfit_nb.magics"},
    "sim": {"altair", "ipywidgets", "anywidget", "IPython", "dfit_nb.views", "dfit_nb.widgets", "dfit_nb.magics"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    pkg_parts = ["dfit_nb", *path.relative_to(PKG).parent.parts]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names.add(mod)
                names.update(f"{mod}.{a.name}" for a in node.names)
            elif node.module:
                names.add(node.module)
    return names


@pytest.mark.parametrize("floor", sorted(FORBIDDEN))
def test_floor_never_imports_upward(floor):
    bad = []
    for path in (PKG / floor).rglob("*.py"):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[floor]):
                bad.append(f"{path.relative_to(PKG)} imports {name}")
    assert not bad, bad


def test_importing_the_core_loads_no_ui_library():
    code = (
        "import sys, dfit_nb, dfit_nb.capture, dfit_nb.sim\n"
        "ui = [m for m in ('altair', 'ipywidgets', 'anywidget', 'IPython') if m in sys.modules]\n"
        "assert not ui, ui\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow  # a fresh Python process importing JAX per UI module
def test_views_and_widgets_load_on_first_access():
    """PEP 562: ``dfit_nb.views`` / ``dfit_nb.widgets`` work after a bare ``import dfit_nb``, and only then load
    the UI libraries."""
    code = (
        "import sys, dfit_nb\n"
        "assert 'altair' not in sys.modules\n"
        "assert callable(dfit_nb.views.timeline) and dfit_nb.widgets.Explorer.__name__ == 'Explorer'\n"
        "assert 'altair' in sys.modules and 'views' in dir(dfit_nb)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_no_module_imports_the_package_root_back():
    """No ``from .. import __version__`` back-edges: submodules read ``dfit_nb._version``."""
    bad = [f"{p.relative_to(PKG)}" for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG
           if "from .. import __version__" in p.read_text() or "from ... import __version__" in p.read_text()]
    assert not bad, bad
