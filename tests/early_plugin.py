"""The test run's first plugin: ``-p tests.early_plugin`` in pyproject's ``addopts`` loads it before the plugins
that installed packages declare, and it defers ``rfc3987_syntax`` there, as ``dfit_nb.setup()`` does elsewhere.

nbval's plugin imports nbformat, which imports jsonschema, which imports ``rfc3987_syntax``: 0.9 s of parser building
in the xdist controller and again in each worker, before any conftest runs, for an IRI check that the stand-in still
answers with the real module, importing it then (:mod:`dfit_nb._runtime.deferred_iri`). ``dfit_nb`` itself is not
imported yet (it imports JAX, and the root ``conftest.py`` sets the compilation cache's variables first), so the
deferral module is loaded from its file under its own name, ``dfit_nb._runtime.deferred_iri``; ``import dfit_nb``
later finds it in ``sys.modules`` and uses that one module (``dfit_nb.setup()``, called by the root ``conftest.py``,
then finds the stand-in in place and reports it as deferred already). pyproject's ``pythonpath`` puts the repository
root on ``sys.path`` before ``-p`` plugins load, so plain ``pytest`` finds this module too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

NAME = "dfit_nb._runtime.deferred_iri"


def deferral_module() -> ModuleType | None:
    """``dfit_nb._runtime.deferred_iri``, loaded without running ``dfit_nb/__init__.py`` (None where dfit_nb is not
    found)."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    package = importlib.util.find_spec("dfit_nb")  # a top-level name: found, not imported
    if package is None or not package.submodule_search_locations:
        return None
    spec = importlib.util.spec_from_file_location(
        NAME, Path(next(iter(package.submodule_search_locations))) / "_runtime" / "deferred_iri.py")
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[NAME]
        raise
    return module


_module = deferral_module()
if _module is not None:
    _module.defer()
