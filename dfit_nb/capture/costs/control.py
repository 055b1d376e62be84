"""Cost rules of containers, host callbacks, Pallas kernels and collectives.

Containers (``jit``, ``scan``, ``while``, ``cond`` ...) cost nothing: the caller walks their
sub-jaxprs. Callbacks and foreign calls are opaque (bytes only); a Pallas kernel uses its
``cost_estimate`` when given; collectives count their bytes only.
"""

from __future__ import annotations

from ._registry import CostContext, OpCost, register_cost_rule

_CONTROL = (
    "jit", "pjit", "closed_call", "core_call", "call", "xla_call", "xla_pmap", "pmap", "scan", "while",
    "cond", "checkpoint", "remat", "remat2", "remat_opt", "custom_jvp_call", "custom_jvp_call_jaxpr",
    "custom_vjp_call", "custom_vjp_call_jaxpr", "custom_lin", "custom_transpose_call",
    "custom_vmap_call", "custom_linear_solve", "linear_call", "run_state", "shard_map", "composite",
    "for",
)


@register_cost_rule(*_CONTROL)
def _control_rule(ctx: CostContext) -> OpCost:
    """Containers cost nothing themselves (no flops, no bytes): the caller walks their
    sub-jaxprs, whose equations carry the cost."""
    return OpCost(op_class="control")


@register_cost_rule("pure_callback", "io_callback", "debug_callback", "debug_print", "ffi_call")
def _opaque_rule(ctx: CostContext) -> OpCost:
    """Host callbacks and foreign calls: known, but their work is invisible (bytes only)."""
    return ctx.cost(op_class="opaque")


@register_cost_rule("pallas_call")
def _pallas_call_rule(ctx: CostContext) -> OpCost:
    """A Pallas kernel: its ``cost_estimate`` when given (what XLA uses too), else opaque."""
    est = ctx.params.get("cost_estimate")
    if est is None:
        return ctx.cost(op_class="opaque")
    return ctx.cost(flops=getattr(est, "flops", 0), transcendentals=getattr(est, "transcendentals", 0),
                    op_class="other")


@register_cost_rule("psum", "pmax", "pmin", "ppermute", "all_gather", "all_to_all", "reduce_scatter",
                    "psum_scatter", "axis_index", "pbroadcast", "psum_invariant", "all_gather_invariant",
                    "ragged_all_to_all", "unreduced_psum")
def _collective_rule(ctx: CostContext) -> OpCost:
    """Collectives: communication, counted as bytes only (no flops)."""
    return ctx.cost(op_class="other")
