"""JAX's CPU programs run on the calling thread (synchronous dispatch), set by :func:`dfit_nb.setup`.

Since jax 0.4.31 the CPU backend dispatches asynchronously by default: each call of a compiled program is handed
to a worker thread and the caller waits on a future when it reads the result. dfit_nb's model runs as many small
programs whose results are read at once (a warm ``cost()`` on 3 ops, a calibration step, an Explorer slider), and
for those the hand-off and the wake-up cost more than the program (figures in benchmarks/README.md;
``python benchmarks/bench_cost_call.py`` runs both side by side). Large programs (a replay, a
sweep of 2,000 machines) are unchanged within noise, because they run far longer than the hand-off. Synchronous
dispatch was JAX's only CPU mode before 0.4.31, and ``jax_cpu_enable_async_dispatch=False`` keeps it.

``import dfit_nb`` leaves the option as it finds it. :func:`configure`, which ``dfit_nb.setup()`` calls, sets it:

* JAX reads the option when it creates its CPU client (the first computation of the process), so it takes effect
  only if no JAX backend exists yet: in a process that has already computed with JAX, the running client is left
  as it is (dfit_nb works the same, with asynchronous dispatch), and ``setup()`` reports it as too late.
* ``DFIT_NB_SYNC_CPU_DISPATCH=0`` (or ``off``, ``false``, ``no``): dfit_nb sets nothing.
* Only the CPU backend reads the option (a GPU or TPU keeps its own dispatch), and only for programs on one
  device (sharded programs keep theirs).

The option is process-wide: after ``setup()`` your own jitted CPU functions run synchronously too, which costs a
loop of tiny steps nothing (the hand-off was dearer) and a loop of long steps a few microseconds each.
"""

from __future__ import annotations

import os

import jax

__all__ = ["ENV", "configure", "reason_unchanged", "synchronous"]

#: ``0`` / ``off`` / ``false`` / ``no`` leaves JAX's CPU dispatch as JAX sets it
ENV = "DFIT_NB_SYNC_CPU_DISPATCH"
_OPTION = "jax_cpu_enable_async_dispatch"


def _backends_exist() -> bool:
    """Whether JAX has created its backends (then the CPU client's dispatch is fixed for this process)."""
    try:
        from jax._src import xla_bridge  # private: the one place that knows; a JAX without it is treated as
        return bool(xla_bridge.backends_are_initialized())  # initialized (nothing is changed)
    except (ImportError, AttributeError):
        return True


def configure() -> bool:
    """Ask JAX for synchronous CPU dispatch unless ``DFIT_NB_SYNC_CPU_DISPATCH`` says no, the option is set
    already, or a backend already exists; returns whether the option was set now (:func:`dfit_nb.setup` calls
    it, and :func:`reason_unchanged` says why not).

    >>> import jax.numpy as jnp
    >>> from dfit_nb._runtime import dispatch as _dispatch
    >>> _ = jnp.zeros(1)  # the process's first computation creates the CPU client
    >>> _dispatch.configure()  # too late now: the client's dispatch is fixed, nothing changes
    False
    """
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return False
    if _OPTION not in jax.config.values or synchronous() or _backends_exist():
        return False
    jax.config.update(_OPTION, False)
    return True


def reason_unchanged() -> str:
    """Why :func:`configure` would leave the option as it is now (``""``: it would set it).

    >>> from dfit_nb._runtime import dispatch as _dispatch
    >>> isinstance(_dispatch.reason_unchanged(), str)
    True
    """
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return f"{ENV}={os.environ[ENV].strip()}"
    if _OPTION not in jax.config.values:
        return f"this JAX has no {_OPTION} option"
    if synchronous():
        return "synchronous already"
    if _backends_exist():
        return "too late: JAX has created its backends, so the CPU client's dispatch is fixed for this process"
    return ""


def synchronous() -> bool:
    """Whether the option asks for synchronous CPU dispatch (it applies to a CPU client created after it was
    set).

    >>> from dfit_nb._runtime import dispatch as _dispatch
    >>> isinstance(_dispatch.synchronous(), bool)
    True
    """
    return not jax.config.values.get(_OPTION, True)
