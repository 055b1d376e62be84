"""Widgets over traces and runs: the :class:`Explorer` (ipywidgets + Altair ``JupyterChart``).

The only layer (with ``magics``) allowed to import ipywidgets. Importing it makes
offline chart rendering the default (see :mod:`dfit_nb.widgets._offline`) unless
the user already chose an Altair renderer.
"""

from ._offline import enable_offline
from .explorer import Explorer

enable_offline()

__all__ = ["Explorer", "enable_offline"]
