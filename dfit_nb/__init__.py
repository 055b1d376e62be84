"""dfit_nb: open the black box of dataflow accelerators for JAX programs.

Quick start::

    import dfit_nb
    fn, args = dfit_nb.examples.get("encoder").build()
    trace = dfit_nb.capture(fn, *args)          # jaxpr + regions + lowering
    print(trace.region_table())
    dfit_nb.sim.cost(trace, dfit_nb.sim.presets.get("tpu_like"), ["ws", "os", "is"])
"""

from ._version import __version__ as __version__
from . import errors as errors
from . import examples as examples
from . import sim as sim
from .capture import Trace as Trace
from .capture import capture as capture
from .capture import load_trace as load_trace

__all__ = ("Trace", "__version__", "capture", "errors", "examples", "load_trace", "sim")
