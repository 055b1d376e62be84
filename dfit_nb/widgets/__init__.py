"""Widgets over traces, runs and sweeps: :class:`Explorer`, :class:`SweepExplorer` (ipywidgets + Altair
``JupyterChart``).

The only layer (with ``magics``) allowed to import ipywidgets. Importing it makes
offline chart rendering the default (see :mod:`dfit_nb.widgets._offline`) unless
the user already chose an Altair renderer.
"""

from .._extras import require

require("ui", "dfit_nb.widgets", ("altair", "vl_convert", "ipywidgets", "anywidget", "PIL"))

from ._offline import enable_offline
from .explorer import Explorer
from .sweep_explorer import SweepExplorer

enable_offline()

__all__ = ["Explorer", "SweepExplorer", "enable_offline"]
