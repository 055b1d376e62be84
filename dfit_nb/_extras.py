"""The optional parts of dfit_nb and the pip extras that install them.

The core (capture, the simulator, the events Datasets, the reprs) needs only what ``pip install dfit_nb``
installs. The notebook UI (:mod:`dfit_nb.views`, :mod:`dfit_nb.widgets`, :mod:`dfit_nb.magics`) and the offline
report (:mod:`dfit_nb.report`, ``dfit-nb report``) need the ``ui`` extra; lazy and cluster sweeps
(``sweep(chunks=...)``, ``replay_batch(..., lazy=True)``, :func:`dfit_nb.sim.to_zarr`) need ``cluster``. A part
imported without its extra raises :class:`MissingExtraError`, one line naming the extra and the command that
installs it.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["EXTRAS", "MissingExtraError", "require"]

#: extra -> the modules (import names) it installs that some part of dfit_nb imports
EXTRAS: dict[str, tuple[str, ...]] = {
    "ui": ("altair", "vl_convert", "ipywidgets", "anywidget", "IPython", "PIL"),
    "cluster": ("dask", "distributed", "zarr"),
}


class MissingExtraError(ImportError):
    """A part of dfit_nb was used without the pip extra that installs its dependencies."""


def _missing(module: str) -> bool:
    if module in sys.modules:
        return sys.modules[module] is None  # None: an import of it failed, or something blocks it
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):  # a finder that refuses the name, or a broken package
        return True


def require(extra: str, part: str, modules: tuple[str, ...] | None = None) -> None:
    """Raise :class:`MissingExtraError` unless the ``modules`` that ``part`` needs (default: all of the extra's)
    can be imported; checks without importing them.

    Parameters
    ----------
    extra : {"ui", "cluster"}
        The extra that installs them.
    part : str
        What needs them, as the message names it (``"dfit_nb.views"``, ``"sweep(chunks=...)"``).
    modules : tuple of str, optional
        The import names needed, a subset of ``EXTRAS[extra]``.

    Raises
    ------
    MissingExtraError
        Naming the part, the missing modules and ``pip install "dfit_nb[<extra>]"``.

    Examples
    --------
    >>> require("ui", "dfit_nb.views", ("sys",))
    >>> require("ui", "dfit_nb.views", ("no_such_module_here",))
    Traceback (most recent call last):
    ...
    dfit_nb._extras.MissingExtraError: dfit_nb.views needs ... "ui" extra (no_such_module_here is not installed): ...
    """
    missing = [m for m in (EXTRAS[extra] if modules is None else modules) if _missing(m)]
    if missing:
        raise MissingExtraError(f'{part} needs the optional dependencies of dfit_nb\'s "{extra}" extra '
                                f'({", ".join(missing)} {"is" if len(missing) == 1 else "are"} not installed): '
                                f'pip install "dfit_nb[{extra}]"', name=missing[0])
