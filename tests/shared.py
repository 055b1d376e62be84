"""Helpers several test modules share (not fixtures: plain functions and context managers)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def one_error_line(err: str) -> str:
    """The CLI's answer to a user error: exactly one 'dfit-nb: error:' line, no traceback."""
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dfit-nb: error: "), err
    return lines[0]


@contextlib.contextmanager
def ipython_shell() -> Iterator[Any]:
    """IPython's InteractiveShell singleton (IPython.display publishes through it) with dfit_nb's magics loaded;
    cleared afterwards when this created it."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    created = not InteractiveShell.initialized()
    if created:
        config = Config()
        config.HistoryManager.hist_file = ":memory:"
        sh = InteractiveShell.instance(config=config)
    else:
        sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "dfit_nb")
    try:
        yield sh
    finally:
        if created:
            InteractiveShell.clear_instance()


def programs(*fns: Any) -> int:
    """How many programs of the jitted ``fns`` (e.g. the two compiles of one batched program) this process holds:
    those of their plain calls (``jit``'s own cache) and those run through :func:`dfit_nb._runtime.exported.call` (kept
    traced on disk; these never enter ``jit``'s cache, so counting that alone would see no program at all)."""
    from dfit_nb._runtime import exported as _exported

    return sum(fn._cache_size() + sum(1 for key in _exported._loaded if key[0] is fn) for fn in fns)
