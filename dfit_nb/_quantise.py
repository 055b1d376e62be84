"""Reduced number formats for GEMM/conv inputs, and the interpreter that runs a captured program with its GEMMs'
inputs in one: what :func:`dfit_nb.precision` measures drift with (its docstring, "How the program runs" and
"Formats", describes both).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax.extend.core as jcore
import jax.numpy as jnp
import ml_dtypes
from jax import lax

from ._dtypes import itemsize
from .capture.walk import Walk


@dataclasses.dataclass(frozen=True)
class Format:
    """A reduced number format for GEMM/conv inputs."""

    name: str
    dtype: str  # the NumPy / ml_dtypes name the machine model prices
    scheme: str  # "cast", "scaled" (per-tensor scale to max_finite) or "int" (symmetric, per channel for weights)
    max_finite: float
    description: str

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(itemsize(self.dtype))

    def quantise(self, x: Any, channel_axes: tuple[int, ...] | None = None) -> Any:
        """``x`` rounded to the format and back to its own dtype (non-floating ``x`` unchanged).

        ``channel_axes``: the axes one int8 scale spans (the rest index the channels); ``None``: one scale for the
        tensor. Only the ``int`` scheme uses per-channel scales.

        >>> import jax.numpy as jnp
        >>> [float(v) for v in FORMATS["int8"].quantise(jnp.array([1.0, -0.5, 0.003]))]  # steps of 1/127
        [1.0, -0.5039370059967041, 0.0]
        >>> float(FORMATS["bf16"].quantise(jnp.float32(1.0 + 2.0 ** -10)))
        1.0
        """
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x
        own = x.dtype
        if self.scheme == "cast":
            return x.astype(self.dtype).astype(own)
        x32 = x.astype(jnp.float32)
        if self.scheme == "scaled":
            amax = jnp.max(jnp.abs(x32))
            scale = jnp.where(amax > 0, amax / self.max_finite, 1.0)
            q = jnp.clip(x32 / scale, -self.max_finite, self.max_finite).astype(getattr(jnp, self.dtype))
            return (q.astype(jnp.float32) * scale).astype(own)
        axes = tuple(range(x.ndim)) if channel_axes is None else channel_axes
        amax = jnp.max(jnp.abs(x32), axis=axes, keepdims=True)
        scale = jnp.where(amax > 0, amax / self.max_finite, 1.0)
        return (jnp.clip(jnp.round(x32 / scale), -self.max_finite, self.max_finite) * scale).astype(own)


#: the formats :func:`precision` knows, by name
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("bf16", "bfloat16", "cast", float(ml_dtypes.finfo(ml_dtypes.bfloat16).max),
           "bfloat16: a cast (8-bit exponent, 8-bit significand)"),
    Format("fp16", "float16", "cast", 65504.0, "IEEE half: a cast (overflows to inf beyond 65504)"),
    Format("fp8_e4m3", "float8_e4m3fn", "scaled", 448.0,
           "float8 e4m3fn with a per-tensor scale to its largest finite value (448)"),
    Format("fp8_e5m2", "float8_e5m2", "scaled", 57344.0,
           "float8 e5m2 with a per-tensor scale to its largest finite value (57344)"),
    Format("int8", "int8", "int", 127.0,
           "int8 symmetric fake-quantisation: per output channel for the weight-like operand, per tensor for the "
           "activation"),
)}

INLINED = ("jit", "call", "remat", "custom_jvp", "custom_vjp")


class Interpreter:
    """Evaluates capture's tagged jaxpr, reducing the inputs of the GEMMs whose mask entry is set (traceable)."""

    def __init__(self, walk: Walk, slot: Mapping[int, int], fmt: Format) -> None:
        self.eqn_op, self.records, self.slot, self.fmt = walk.eqn_op, walk.records, slot, fmt
        self.mask: Any = None

    def __call__(self, closed: jcore.ClosedJaxpr, mask: Any, args: Sequence[Any]) -> list[Any]:
        self.mask = mask
        return self._sub(closed, list(args))

    def _sub(self, j: Any, args: list[Any]) -> list[Any]:
        if isinstance(j, jcore.ClosedJaxpr):
            return self._run(j.jaxpr, list(j.consts), args)
        return self._run(j, [], args)

    def _run(self, jaxpr: jcore.Jaxpr, consts: list[Any], args: list[Any]) -> list[Any]:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jcore.Literal) else env[v]

        env.update(zip(jaxpr.constvars, consts, strict=True))
        env.update(zip(jaxpr.invars, args, strict=True))
        for eqn in jaxpr.eqns:
            op = self.eqn_op[id(eqn)]
            outs = self._eval(op, eqn, [read(v) for v in eqn.invars])
            for v, x in zip(eqn.outvars, outs, strict=True):
                if not isinstance(v, jcore.DropVar):
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _eval(self, op: int, eqn: Any, invals: list[Any]) -> list[Any]:
        kind, p = self.records[op].container, eqn.params
        if kind == "scan":
            nc, nk = p["num_consts"], p["num_carry"]
            consts, carry, xs = invals[:nc], invals[nc:nc + nk], invals[nc + nk:]

            def body(c: Any, x: Any) -> tuple[Any, Any]:
                outs = self._sub(p["jaxpr"], [*consts, *c, *x])
                return outs[:nk], outs[nk:]

            carry, ys = lax.scan(body, carry, xs, length=p["length"], reverse=p["reverse"],
                                 unroll=p.get("unroll", 1))
            return [*carry, *ys]
        if kind == "while":
            cn, bn = p["cond_nconsts"], p["body_nconsts"]
            cconsts, bconsts, carry = invals[:cn], invals[cn:cn + bn], invals[cn + bn:]
            out = lax.while_loop(lambda c: self._sub(p["cond_jaxpr"], [*cconsts, *c])[0],
                                 lambda c: tuple(self._sub(p["body_jaxpr"], [*bconsts, *c])), tuple(carry))
            return list(out)
        if kind == "cond":
            branches = [functools.partial(lambda b, *a: tuple(self._sub(b, list(a))), b) for b in p["branches"]]
            return list(lax.switch(invals[0], branches, *invals[1:]))
        if kind in INLINED:
            sub = next(v for v in p.values() if isinstance(v, (jcore.ClosedJaxpr, jcore.Jaxpr)))
            n_in = len((sub.jaxpr if isinstance(sub, jcore.ClosedJaxpr) else sub).invars)
            return self._sub(sub, invals[len(invals) - n_in:])
        if op in self.slot:
            invals = self._reduce(eqn, invals, self.mask[self.slot[op]])
        out = eqn.primitive.bind(*invals, **p)
        return list(out) if eqn.primitive.multiple_results else [out]

    def _reduce(self, eqn: Any, invals: list[Any], flag: Any) -> list[Any]:
        lhs, rhs = invals[0], invals[1]
        if eqn.primitive.name == "dot_general":
            (_, rhs_contract), _ = eqn.params["dimension_numbers"]
            axes = tuple(int(a) for a in rhs_contract)
        else:  # conv: one scale per output feature of the kernel
            out_feature = int(eqn.params["dimension_numbers"].rhs_spec[0])
            axes = tuple(i for i in range(rhs.ndim) if i != out_feature)
        return [jnp.where(flag, self.fmt.quantise(lhs), lhs), jnp.where(flag, self.fmt.quantise(rhs, axes), rhs),
                *invals[2:]]
