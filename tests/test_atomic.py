"""Whole files are written in one place (dfit_nb._atomic.atomic_file): no reader sees half of one."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

import dfit_nb
from dfit_nb import _report_charts

PACKAGE = Path(dfit_nb.__file__).parent
#: modules allowed to rename files themselves: the helper, and the saves of results, which swap whole Zarr
#: folders (a folder cannot be renamed over another) and recover what a killed process left
RENAMERS = {"_atomic.py", "_files.py", "sim/_sweep_store.py"}


def _renames(path: Path) -> list[int]:
    """Lines of ``path`` that call os.replace / os.rename or Path.replace / Path.rename with one argument."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner, name = node.func.value, node.func.attr
        if name in ("replace", "rename") and isinstance(owner, ast.Name) and owner.id == "os":
            lines.append(node.lineno)
    return lines


def test_only_the_atomic_helper_and_the_result_saves_rename_files():
    found = {str(p.relative_to(PACKAGE)): _renames(p) for p in PACKAGE.rglob("*.py")}
    others = {name: lines for name, lines in found.items() if lines and name not in RENAMERS}
    assert not others, f"write whole files with dfit_nb._atomic.atomic_file, not a rename of your own: {others}"
    assert found["_atomic.py"]  # the scan sees a rename where there is one


def test_a_bundle_that_cannot_be_stored_leaves_no_temporary(tmp_path, monkeypatch):
    class FakeVlConvert:
        @staticmethod
        def javascript_bundle(vl_version=None):
            return "var vega = 1; </script>"

    stored = tmp_path / "vega" / "bundle-x.js"

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied", str(dst))

    with monkeypatch.context() as m:
        m.setattr(os, "replace", refuse)
        js = _report_charts._build_bundle(FakeVlConvert, None, stored)
    assert js == "var vega = 1; <\\/script>"  # built and returned all the same
    assert list(stored.parent.iterdir()) == []  # nothing stored, no temporary left
    assert _report_charts._build_bundle(FakeVlConvert, None, stored) == js
    assert stored.read_text(encoding="utf-8") == js and [p.name for p in stored.parent.iterdir()] == [stored.name]
    assert stored.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("name", sorted(RENAMERS))
def test_the_allowed_renamers_exist(name):
    assert (PACKAGE / name).is_file()
