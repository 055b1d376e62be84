"""dfit_nb: open the black box of dataflow accelerators for JAX programs.

Quick start::

    import dfit_nb
    dfit_nb.setup()        # optional, process-wide: JAX's compilation cache and CPU dispatch for speed
    fn, args = dfit_nb.examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)          # jaxpr + regions + lowering
    print(trace.region_table())
    dfit_nb.sim.cost(trace, dfit_nb.sim.presets.get("tpu_like"), ["ws", "os", "is"])
    run = dfit_nb.replay(trace, dfit_nb.sim.presets.get("cerebras_like"), "ws")   # the event cube
"""

from ._version import __version__ as __version__
from . import errors as errors
from ._setup import setup as setup

from . import examples as examples
from . import events as events
from . import sim as sim
from .capture import Trace as Trace
from .capture import capture as capture
from .capture import load_trace as load_trace
from .sim import replay as replay
from .precision_study import PrecisionStudy as PrecisionStudy
from .precision_study import precision as precision
from .precision_study import precision_verdict as precision_verdict
from .sim.run import Run as Run
from .sim.run import load_run as load_run

__all__ = ("PrecisionStudy", "Run", "Trace", "__version__", "capture", "errors", "events", "examples", "load_run",
           "load_trace", "precision", "precision_verdict", "replay", "setup", "sim")


#: submodules imported on first use (PEP 562): ``import dfit_nb`` stays free of Altair and ipywidgets
_LAZY = ("views", "widgets")


def __getattr__(name: str) -> object:
    """``dfit_nb.views`` and ``dfit_nb.widgets`` import on first access."""
    if name in _LAZY:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dfit_nb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext dfit_nb``: :func:`setup`, then register ``%dfit``, ``%%dfit``, ``%dfit_presets`` and
    ``%dfit_compare``.

    The magics (and the UI libraries they need) are imported here, not by ``import dfit_nb``, and after
    :func:`setup`, which must precede Altair's import to defer ``rfc3987_syntax``.
    """
    setup()
    from .magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext dfit_nb``: remove the magics."""
    from .magics import unload_ipython_extension as unload

    unload(ipython)
