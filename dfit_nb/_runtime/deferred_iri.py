"""rfc3987_syntax is imported at the first IRI check, not when jsonschema is (set by :func:`dfit_nb.setup`).

Altair imports jsonschema, and jsonschema imports every format-checking library it finds. Where JupyterLab is
installed (jupyter-events asks for ``jsonschema[format-nongpl]``), that includes ``rfc3987_syntax``, which builds
some forty Earley parsers when it is imported: 1.1-1.5 s on 2 cores, paid by every process that draws a chart (the
CLI's report, each notebook kernel, each test process), for a check ("iri", "iri-reference") that no Vega-Lite
schema and nothing in dfit_nb uses. :func:`defer`, which ``dfit_nb.setup()`` calls (``import dfit_nb`` does not),
puts a stand-in for the module in ``sys.modules`` that holds what jsonschema takes from it (``is_valid_syntax``) as
a function that imports the real module at its first call and hands it on; any other use of the stand-in (an
attribute, a submodule, ``from rfc3987_syntax import ...``) imports the real module there and then, and the
stand-in leaves ``sys.modules``. Every validation gives the real module's answer (``tests/test_deferred_iri.py``
compares them); only the second it costs moves to the first IRI checked, if one ever is. ``python
benchmarks/bench_import.py`` prints ``import dfit_nb.report`` with and without (1.81 s against 3.28 s, median of 5
fresh processes each, alternating). It helps only before jsonschema is imported: the CLI and the IPython
extension call ``setup()`` before they import Altair.

Left alone: a process where the module is already imported, where it (or lark, which it needs) is not installed,
and ``DFIT_NB_DEFER_IRI=0`` (or ``off``, ``false``, ``no``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types
from typing import Any

__all__ = ["ENV", "NAME", "defer"]

#: ``0`` / ``off`` / ``false`` / ``no`` leaves the module's import where jsonschema puts it
ENV = "DFIT_NB_DEFER_IRI"
#: the module deferred
NAME = "rfc3987_syntax"

_lock = threading.RLock()


class StandIn(types.ModuleType):
    """``rfc3987_syntax`` before its import: any attribute it does not hold imports the real module."""

    def __getattr__(self, attr: str) -> Any:
        if attr == "__all__":  # `from rfc3987_syntax import *`: the real module's public names (it has no __all__)
            module = real()
            return getattr(module, "__all__", [k for k in vars(module) if not k.startswith("_")])
        if attr.startswith("__") and attr.endswith("__"):  # probes (copy, pickle, inspect) must not import it
            raise AttributeError(attr)
        return getattr(real(), attr)

    def __dir__(self) -> list[str]:
        return dir(real())


def real() -> types.ModuleType:
    """The real ``rfc3987_syntax``, imported now if only the stand-in was there."""
    with _lock:  # two threads validating their first IRI import it once
        module = sys.modules.get(NAME)
        if isinstance(module, StandIn):
            del sys.modules[NAME]
            try:
                module = importlib.import_module(NAME)
            except BaseException:
                sys.modules.setdefault(NAME, _stand_in)  # as before: the next use tries again and raises again
                raise
        return module if module is not None else importlib.import_module(NAME)


def is_valid_syntax(term: str, value: str) -> bool:
    """``rfc3987_syntax.is_valid_syntax(term, value)``: what jsonschema's "iri" and "iri-reference" checks call."""
    return real().is_valid_syntax(term, value)


_stand_in = StandIn(NAME, "stand-in for rfc3987_syntax until its first use (see dfit_nb._runtime.deferred_iri)")


def defer() -> bool:
    """Put the stand-in in ``sys.modules`` unless ``DFIT_NB_DEFER_IRI`` says no, the module is imported already,
    or it or lark cannot be found; returns whether it was put there now.

    >>> import sys
    >>> from dfit_nb._runtime import deferred_iri as _deferred_iri
    >>> _ = _deferred_iri.defer()  # puts the stand-in there, unless it is there already
    >>> _deferred_iri.defer()  # at most once: the module (or its stand-in) is in sys.modules by now
    False
    >>> sys.modules.get("rfc3987_syntax") is None or callable(sys.modules["rfc3987_syntax"].is_valid_syntax)
    True
    """
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return False
    with _lock:
        if NAME in sys.modules:
            return False
        try:  # finds, never runs, either module
            spec, lark = importlib.util.find_spec(NAME), importlib.util.find_spec("lark")
        except (ImportError, ValueError):
            return False
        if spec is None or lark is None or spec.submodule_search_locations is None:
            return False
        # what importlib reads from a package in sys.modules: a submodule import goes through __path__
        _stand_in.__spec__ = spec
        _stand_in.__loader__ = spec.loader
        _stand_in.__file__ = spec.origin
        _stand_in.__path__ = list(spec.submodule_search_locations)
        _stand_in.__package__ = NAME
        _stand_in.is_valid_syntax = is_valid_syntax
        sys.modules[NAME] = _stand_in
        return True
