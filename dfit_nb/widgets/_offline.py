"""Offline rendering: charts must never need a CDN.

Altair 6's default ``html`` renderer loads Vega from a CDN (it fails offline) and
JupyterLab 4.6 ships no renderer for Vega-Lite v6's mimetype. The offline path
chosen here is ``alt.JupyterChart`` with its JavaScript bundled into the
widget (``JupyterChart.enable_offline(True)``), shown through Altair's
``jupyter`` renderer with ``offline=True``: interactive, selections readable
from Python, and no network. It becomes the default on import of
:mod:`dfit_nb.widgets` only while the user has not chosen a renderer of their
own (Altair's ``default`` is active); a user's choice is left alone.
"""

from __future__ import annotations

import altair as alt

_ENABLED = False


def enable_offline(force: bool = False) -> str:
    """Make offline JupyterChart rendering the default (unless the user chose a renderer); returns the active one.

    >>> import altair as alt
    >>> enable_offline() in alt.renderers.names()
    True
    """
    global _ENABLED
    alt.JupyterChart.enable_offline(True)
    if force or alt.renderers.active == "default" or _ENABLED:
        alt.renderers.enable("jupyter", offline=True)
        _ENABLED = True
    return alt.renderers.active
