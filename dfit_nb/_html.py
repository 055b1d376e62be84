"""HTML from the Jinja2 templates in ``dfit_nb/templates``: the report page, the playbook and the reprs.

Autoescaping is on for every template: a value is HTML-escaped unless it is :class:`markupsafe.Markup`, so a
user's string (a region, a function or a machine name) can never open a tag, a comment or a script. The few
values that are HTML or script text already (an SVG drawn by vl-convert, a chart spec made safe for a
``<script>`` element by :func:`dfit_nb.report.embedded_json`, the inlined Vega bundle) are marked with
:func:`trusted` where they are made, so every exception to the escaping is visible at its source.

Jinja2 (about 40 ms to import) is imported on the first render, not with ``dfit_nb``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["macro", "render", "trusted"]


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    # StrictUndefined: a misspelt variable fails the render instead of printing nothing. trim_blocks and
    # lstrip_blocks keep the templates readable without putting their layout whitespace into the pages.
    env = jinja2.Environment(loader=jinja2.PackageLoader("dfit_nb", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    # Python's format specifications ("{:,.2f}", "{:+.1%}"), which Jinja's printf-style format filter lacks
    env.filters["fmt"] = format
    env.tests["finite"] = lambda x: x is not None and math.isfinite(x)
    return env


def render(template: str, **context: Any) -> str:
    """The template ``dfit_nb/templates/<template>`` rendered with ``context``, every value escaped.

    >>> print(render("pre.html.j2", text="<b>"))
    <pre>&lt;b&gt;</pre>
    """
    return _environment().get_template(template).render(**context)


def macro(template: str, name: str, *args: Any, **kwargs: Any) -> str:
    """The macro ``name`` of ``template`` called with ``args``: a fragment (a widget's status line).

    >>> macro("widgets.html.j2", "error", "ValueError: x < 1")
    "<b style='color:#b00'>ValueError: x &lt; 1</b>"
    """
    return str(getattr(_environment().get_template(template).module, name)(*args, **kwargs))


def trusted(text: str) -> Any:
    """``text`` marked as HTML that needs no escaping; only for text dfit_nb made safe itself."""
    import markupsafe

    return markupsafe.Markup(text)
