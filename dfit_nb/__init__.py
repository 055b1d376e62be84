"""dfit_nb: open the black box of dataflow accelerators for JAX programs.

Quick start::

    import dfit_nb
    fn, args = dfit_nb.examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)          # jaxpr + regions + lowering
    print(trace.region_table())
    dfit_nb.sim.cost(trace, dfit_nb.sim.presets.get("tpu_like"), ["ws", "os", "is"])
    run = dfit_nb.replay(trace, dfit_nb.sim.presets.get("cerebras_like"), "ws")   # the event cube
"""

from ._version import __version__ as __version__
from . import errors as errors
from . import _compile_cache, _deferred_iri, _dispatch

# JAX's persistent compilation cache (~/.cache/dfit_nb/jax; DFIT_NB_COMPILATION_CACHE=0 or a path), set before
# anything compiles; a directory it cannot write warns once and leaves JAX without one (see _compile_cache)
_compile_cache.configure()
# JAX's CPU programs run on the calling thread, for dfit_nb's many small programs (DFIT_NB_SYNC_CPU_DISPATCH=0 leaves
# JAX's asynchronous default); only before the process's first computation (see _dispatch)
_dispatch.configure()
# rfc3987_syntax (1.1-1.5 s of parser building, imported by jsonschema, which Altair imports, where JupyterLab is
# installed) is imported at its first IRI check instead; DFIT_NB_DEFER_IRI=0 leaves it (see _deferred_iri)
_deferred_iri.defer()

from . import examples as examples
from . import events as events
from . import sim as sim
from .capture import Trace as Trace
from .capture import capture as capture
from .capture import load_trace as load_trace
from .sim._replay import replay as replay
from .precision_study import PrecisionStudy as PrecisionStudy
from .precision_study import precision as precision
from .precision_study import precision_verdict as precision_verdict
from .sim.run import Run as Run
from .sim.run import load_run as load_run

__all__ = ("PrecisionStudy", "Run", "Trace", "__version__", "capture", "errors", "events", "examples", "load_run",
           "load_trace", "precision", "precision_verdict", "replay", "sim")


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
    """``%load_ext dfit_nb``: register ``%dfit``, ``%%dfit``, ``%dfit_presets`` and ``%dfit_compare``.

    The magics (and the UI libraries they need) are imported here, not by ``import dfit_nb``.
    """
    from .magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: object) -> None:
    """``%unload_ext dfit_nb``: remove the magics."""
    from .magics import unload_ipython_extension as unload

    unload(ipython)
