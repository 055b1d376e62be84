"""How XLA compiles dfit_nb's compile-bound model programs: with its CPU loop emitters and LLVM's optimisation
passes off, which compile them faster.

XLA's CPU backend turns each fusion into machine code with one of two emitters: the newer MLIR fusion emitters
(its default) or the elemental loop emitters (``xla_cpu_use_fusion_emitters=False``), and then runs LLVM's
optimisation pipeline over it (``xla_backend_optimization_level``, 2 by default). dfit_nb's replay, cost and
selection programs are hundreds of small element-wise fusions on arrays of a few hundred to a few thousand
elements: what a first call of them waits for is their compile, and LLVM's vectorising and unrolling buys their
run little. With both options a first replay, a first ``cost()`` and a cold ``dfit-nb report`` wait markedly
less, and the programs run somewhat slower (figures in benchmarks/README.md; ``python
benchmarks/bench_compile_options.py`` measures both ways in fresh processes). So the programs whose run time
is what counts keep XLA's defaults: the thermal model's, ``cost()`` of up to :data:`~dfit_nb.sim._cost.COST_OPS`
ops (a latency figure), and the batched programs (a sweep's, ``replay_batch``'s and a batch selection's, vmapped
over machines, which run 2-4x slower with the options) for calls past :data:`COMPILE_BOUND_WORK` element
evaluations; each batched program is compiled both ways, and :func:`by_work` picks per call (a few machines: the
options).

The figures are the same to rounding: ``tests/test_compile_options.py`` compares every output of the replay, the
cost table and the selection with and without the options (relative 1e-13; the benchmark finds them identical),
a sweep's, a batch replay's and a batch selection's outputs from the batched programs' two compiles, and an op's
cost in a small table (XLA's defaults) with its cost in a large one (the options), discrete choices exactly.

Only dfit_nb's own programs are compiled this way: your jitted functions, and the programs :func:`dfit_nb.capture`
compiles to read your function's XLA fusions, keep XLA's defaults.

* ``DFIT_NB_XLA_OPTIONS=0`` (or ``off``, ``false``, ``no``): XLA's defaults for dfit_nb's programs too.
* An XLA that does not know an option (a jaxlib that dropped it) is found by one tiny compile at the first
  model program of the process, and the defaults are kept (the figures do not change, the compiles are slower).
* Only the CPU backend is given the options; a GPU or TPU compiles dfit_nb's programs with its defaults.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = ["COMPILE_BOUND_WORK", "ENV", "OPTIONS", "by_work", "jit", "options"]

#: ``0`` / ``off`` / ``false`` / ``no`` compiles dfit_nb's programs with XLA's defaults
ENV = "DFIT_NB_XLA_OPTIONS"
#: what dfit_nb's model programs are compiled with (on the CPU backend, where XLA knows the option)
OPTIONS: dict[str, Any] = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 0}
#: element evaluations per call (machines x dataflow assignments x padded ops) up to which a batched model program
#: (a sweep's, a batch replay's, a batch selection's) is compiled with :data:`OPTIONS`: up to here a call with the
#: options is ahead (their shorter compile against their slower run) from its first run to about its tenth; past
#: it the defaults' faster run soon pays for their longer compile (figures in benchmarks/README.md;
#: ``python benchmarks/bench_compile_options.py --batches``)
COMPILE_BOUND_WORK = 8192


@functools.cache
def options() -> dict[str, Any] | None:
    """The compiler options for dfit_nb's model programs in this process: :data:`OPTIONS`, or ``None`` (XLA's
    defaults) where ``DFIT_NB_XLA_OPTIONS`` says no, the default backend is not the CPU, or XLA rejects them.

    Decided once, at the first model program (it needs a backend, which importing dfit_nb must not create).

    >>> from dfit_nb._runtime import compile_options as _compile_options
    >>> _compile_options.options() in (None, _compile_options.OPTIONS)
    True
    """
    if os.environ.get(ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return None
    if jax.default_backend() != "cpu":
        return None
    try:  # one tiny compile (milliseconds): an XLA without the option says "No such compile option"
        jax.jit(lambda x: x + 1, compiler_options=OPTIONS).lower(np.zeros(1, np.float32)).compile()
    except Exception:
        return None
    return dict(OPTIONS)


class _Program:
    """``jax.jit(fun, **jit_kwargs)`` compiled with :func:`options`, made at its first use; everything of the
    jitted function (``lower``, ``trace``, ``_cache_size``, ...) is reached through it, and ``__wrapped__`` is
    ``fun``, as for ``jax.jit``."""

    def __init__(self, fun: Callable[..., Any], jit_kwargs: dict[str, Any]) -> None:
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._jit_kwargs = jit_kwargs
        self._jitted: Any = None
        self._options: dict[str, Any] | None = None
        self._lock = threading.Lock()

    @property
    def jitted(self) -> Any:
        """The ``jax.jit`` function itself (for :func:`jax.export.export`, which takes nothing else)."""
        jitted = self._jitted
        if jitted is None:
            with self._lock:  # one jit (and so one cache of compiled programs) however many threads ask at once
                if self._jitted is None:
                    self._options = options()
                    self._jitted = jax.jit(self._fun, compiler_options=self._options, **self._jit_kwargs)
                jitted = self._jitted
        return jitted

    @property
    def compiler_options(self) -> dict[str, Any] | None:
        """What it is compiled with (:func:`options` when its jit was made)."""
        _ = self.jitted
        return self._options

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.jitted(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)

    def __repr__(self) -> str:
        return f"<dfit_nb model program {self.__qualname__}>"


def jit(fun: Callable[..., Any] | None = None, **jit_kwargs: Any) -> Any:
    """``jax.jit`` for dfit_nb's model programs: the same arguments, compiled with :func:`options`.

    >>> import functools, jax.numpy as jnp
    >>> from dfit_nb._runtime.compile_options import jit
    >>> @functools.partial(jit, static_argnames="power")
    ... def f(x, power):
    ...     return x ** power
    >>> float(f(jnp.float32(3.0), power=2))
    9.0
    """
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    return _Program(fun, jit_kwargs)


def by_work(work: int, compile_bound: Any, run_bound: Any) -> Any:
    """Which of a batched model program's two compiles a call runs: ``compile_bound`` (compiled with
    :func:`options`) for at most :data:`COMPILE_BOUND_WORK` element evaluations, else ``run_bound`` (XLA's
    defaults, whose program runs 2-4x faster on large batches).

    ``work``: the call's padded machines x dataflow assignments x padded ops. Both compile one function, so both
    give the same numbers to rounding (``tests/test_compile_options.py``).

    >>> from dfit_nb._runtime import compile_options as _compile_options
    >>> _compile_options.by_work(16 * 2 * 128, "options", "defaults")
    'options'
    >>> _compile_options.by_work(64 * 2 * 128, "options", "defaults")
    'defaults'
    """
    return compile_bound if work <= COMPILE_BOUND_WORK else run_bound
