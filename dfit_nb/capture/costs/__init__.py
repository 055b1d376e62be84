"""Per-primitive cost rules for jaxpr equations.

A *cost rule* turns one jaxpr equation (primitive name, params, input and output avals)
into an :class:`OpCost`: floating-point work, transcendental work, bytes moved and, for
matrix products and convolutions, a GEMM view ``(batch, m, k, n)``. Rules live in a
registry keyed by primitive name (:func:`register_cost_rule`); :func:`cost_of` looks the
rule up and applies it. There is one small rule per primitive family, not an if-chain,
and users may replace any rule by registering a new one under the same name.

Conventions
-----------
The numbers follow the conventions of XLA's ``HloCostAnalysis``, i.e. what
``jax.jit(f).lower(*args).compile().cost_analysis()`` reports, so that summing
``flops`` over the equations of a program (times their execution counts) reproduces
XLA's total. The rules were checked one primitive at a time against the CPU backend of
JAX 0.10.2 (see ``tests/capture/test_costs.py``). In short:

* **flops** are counted per executed HLO instruction *after* XLA's optimizations, per
  single execution of the op: an elementwise arithmetic, comparison, logical, select,
  clamp or conversion instruction costs one flop per output element; a reduction costs
  one application of its reducer per element it folds away (``in - out``); a dot costs
  ``2 * batch * m * k * n``; a convolution costs two flops per multiply-add that touches
  real (non-padding, non-hole) input; data movement costs nothing.
* **transcendentals** count the instructions XLA treats as transcendental (exp, log,
  log1p, expm1, tanh, logistic's exp, sin, cos, tan, atan2, pow, sqrt, rsqrt, cbrt, erf,
  ...), one per output element, and they are *not* also counted as flops.
* Several JAX primitives are not single HLO instructions: JAX or XLA expands them
  (``logistic``, ``erf_inv``, ``lgamma``, ``asinh``, ``nextafter``, ``integer_pow``,
  ``argmax``, ``select_n`` with an integer predicate, ``cumsum`` ...). Their rules count
  the expanded instruction sequence; the per-element constants for the special functions
  were measured and depend on the dtype (float16 and bfloat16 share one row because both
  are computed in float32 by the expansion).
* **bytes_read / bytes_written** are the unfused view: the sizes of all input avals
  (literals included) and of all output avals. Fusion is a later, separate concern.
* Containers (``jit``, ``scan``, ``while``, ``cond``, ``remat`` ...) cost zero: the caller
  walks their sub-jaxprs, whose equations carry the cost.

Known gaps (documented per rule where they apply)
-------------------------------------------------
* Whole-program effects are invisible to a per-equation rule: algebraic simplification
  with literal operands (``x * 1``, ``x + 0``, ``pow(x, 2.0)``), common-subexpression
  elimination, dead-code elimination, constant folding.
* The CPU backend computes bfloat16 arithmetic (and float16/bfloat16 dots and
  convolutions) in float32 and counts the inserted conversions as flops. The rules
  follow the backend-neutral HLO instead (one flop per element, ``2mkn`` per dot).
* Linear-algebra primitives (LAPACK custom calls on CPU), ``top_k`` and
  ``rng_bit_generator`` have no exact XLA count; their rules give textbook estimates.

Examples
--------
>>> import jax, jax.numpy as jnp
>>> from dfit_nb.capture.costs import cost_of
>>> closed = jax.make_jaxpr(jnp.dot)(jnp.ones((4, 8)), jnp.ones((8, 8)))
>>> eqn = closed.eqns[0]
>>> c = cost_of(eqn.primitive.name, eqn.params,
...             [v.aval for v in eqn.invars], [v.aval for v in eqn.outvars])
>>> c.flops, (c.batch, c.m, c.k, c.n), c.op_class
(512, (1, 4, 8, 8), 'gemm')
"""

from __future__ import annotations

from ._registry import _REGISTRY as _REGISTRY
from ._registry import OP_CLASSES as OP_CLASSES
from ._registry import CostContext as CostContext
from ._registry import CostRule as CostRule
from ._registry import OpCost as OpCost
from ._registry import UnknownPrimitiveError as UnknownPrimitiveError
from ._registry import cost_of as cost_of
from ._registry import cost_of_eqn as cost_of_eqn
from ._registry import get_cost_rule as get_cost_rule
from ._registry import has_cost_rule as has_cost_rule
from ._registry import register_cost_rule as register_cost_rule
from ._registry import registered_primitives as registered_primitives
from ._shapes import aval_nbytes as aval_nbytes

# Importing the rule modules registers their rules, in this order (the order of the
# former single module); keep it so that the registry is filled the same way.
# isort: off
from . import elementwise as elementwise
from . import reductions as reductions
from . import contractions as contractions
from . import data_movement as data_movement
from . import prng as prng
from . import linalg as linalg
from . import control as control
# isort: on
from .reductions import SCAN_TREE_BASE as SCAN_TREE_BASE

__all__ = (
    "OP_CLASSES",
    "CostContext",
    "CostRule",
    "OpCost",
    "UnknownPrimitiveError",
    "aval_nbytes",
    "cost_of",
    "cost_of_eqn",
    "get_cost_rule",
    "has_cost_rule",
    "register_cost_rule",
    "registered_primitives",
)
