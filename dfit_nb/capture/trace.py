"""``Trace``: the captured program as xarray Datasets, saved and loaded without pickle."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from .. import _operands
from .._dtypes import itemsize
from .._files import open_tree, save_tree
from .._html import render

_PARTS = ("ops", "edges", "regions", "lowering", "operands")
#: the parts every saved trace has (``operands`` came later: older files get it from their ops' shapes text)
_REQUIRED = _PARTS[:4]


@dataclasses.dataclass(frozen=True)
class Overhead:
    """A mode's measured cost against the plain jitted call.

    ``baseline_s`` and ``instrumented_s`` are medians of per-call wall times
    over ``n_calls`` calls each. The calls ran in ``rounds`` rounds, each a
    block of plain calls beside a block of instrumented ones; ``ratio`` is the
    paired estimate over the rounds (the exponential of the mean log ratio of
    each round's medians) and ``ratio_low``/``ratio_high`` its 95% Student's t
    interval (NaN with fewer than two rounds). ``percent`` is
    ``100 * (ratio - 1)``. Static mode runs nothing: its ratio is 1 by
    construction and its times are NaN. ``capture_s`` is the wall time the
    whole capture took (tracing, lowering, compiling, measuring). A trace saved
    before rounds were recorded has ``rounds == 0``: its ratio is the medians'
    quotient, without an interval.

    Examples
    --------
    >>> o = Overhead("profile", 0.50, 0.51, n_calls=12, paired_ratio=1.02, ratio_low=0.99, ratio_high=1.05, rounds=12)
    >>> round(o.percent, 1), o.distinguishable_from_zero, o.describe()
    (2.0, False, '+2.00% (95% interval -1.00% to +5.00%, 12 rounds: not distinguishable from 0)')
    """

    mode: str
    baseline_s: float = float("nan")
    instrumented_s: float = float("nan")
    n_calls: int = 0
    capture_s: float = float("nan")
    paired_ratio: float = float("nan")
    ratio_low: float = float("nan")
    ratio_high: float = float("nan")
    rounds: int = 0

    @property
    def ratio(self) -> float:
        """instrumented / baseline: the paired estimate over rounds (1.0 in static mode)."""
        if self.mode == "static":
            return 1.0
        if np.isfinite(self.paired_ratio):
            return self.paired_ratio
        return self.instrumented_s / self.baseline_s

    @property
    def percent(self) -> float:
        """Overhead in percent of the plain jitted call."""
        return 100.0 * (self.ratio - 1.0)

    @property
    def interval_percent(self) -> tuple[float, float]:
        """The 95% interval of :attr:`percent` (NaN bounds where there is none)."""
        return 100.0 * (self.ratio_low - 1.0), 100.0 * (self.ratio_high - 1.0)

    @property
    def distinguishable_from_zero(self) -> bool | None:
        """Whether the interval excludes 0% (``None``: no interval, static mode or one round)."""
        low, high = self.interval_percent
        if self.mode == "static" or not (np.isfinite(low) and np.isfinite(high)):
            return None
        return bool(low > 0.0 or high < 0.0)

    def describe(self) -> str:
        """The overhead with its interval, in words, e.g. ``+2.00% (95% interval ..., not distinguishable from 0)``."""
        if self.mode == "static":
            return "none: static mode runs nothing"
        low, high = self.interval_percent
        if self.distinguishable_from_zero is None:
            return f"{self.percent:+.2f}% (no interval: {max(self.rounds, 1)} round)"
        verdict = "" if self.distinguishable_from_zero else ": not distinguishable from 0"
        return f"{self.percent:+.2f}% (95% interval {low:+.2f}% to {high:+.2f}%, {self.rounds} rounds{verdict})"

    def to_attrs(self) -> dict[str, Any]:
        """Flat attrs for netCDF."""
        return {f"overhead_{f.name}": getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> Overhead:
        """Inverse of :meth:`to_attrs`."""
        kw = {f.name: attrs[f"overhead_{f.name}"] for f in dataclasses.fields(cls) if f"overhead_{f.name}" in attrs}
        kw["mode"] = str(kw.get("mode", attrs.get("mode", "static")))
        for name in ("n_calls", "rounds"):
            if name in kw:
                kw[name] = int(kw[name])
        for name in ("baseline_s", "instrumented_s", "capture_s", "paired_ratio", "ratio_low", "ratio_high"):
            if name in kw:
                kw[name] = float(kw[name])
        return cls(**kw)


#: distinct argument shapes :func:`describe_arguments` names before it summarises the rest
ARGUMENTS_SHOWN = 8


def describe_arguments(arg_shapes: str, shown: int = ARGUMENTS_SHOWN) -> str:
    """A trace's argument list (``attrs["arg_shapes"]``, ``"; "``-separated) short enough to read: all of it when
    it has at most ``shown`` arguments, else their count and bytes, the ``shown`` most frequent shapes with how
    many arguments have each, and how many other shapes there are (ResNet-50's 321 weight arrays become one line).

    Examples
    --------
    >>> describe_arguments("float32[8,128]; float32[128,64]")
    'float32[8,128]; float32[128,64]'
    >>> describe_arguments("; ".join(["float32[64]"] * 5 + ["float32[3,3,64,64]"] * 3 + ["int32[]"]), shown=2)
    '9 arguments, 0.44 MB: 5 x float32[64], 3 x float32[3,3,64,64] and 1 other shape'
    """
    parts = [p.strip() for p in str(arg_shapes).split(";") if p.strip()]
    if len(parts) <= shown:
        return "; ".join(parts)
    counts: dict[str, int] = {}
    for p in parts:
        counts[p] = counts.get(p, 0) + 1
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:shown]  # stable: first seen first among equal counts
    total = 0.0
    for p in parts:
        try:
            arrays = _operands.parse(p)
        except _operands.ShapeTextError:  # an argument that is not an array (its repr): no bytes
            continue
        total += sum(itemsize(dtype) * float(np.prod(dims or [1])) for dtype, dims in arrays if dims is not None)
    rest = len(counts) - len(top)
    tail = f" and {rest} other shape{'s' if rest != 1 else ''}" if rest else ""
    return (f"{len(parts)} arguments, {total / 1e6:.2f} MB: " + ", ".join(f"{n} x {p}" for p, n in top) + tail)


class Trace:
    """A captured JAX program: ops, dataflow edges, regions and the lowering record.

    Attributes
    ----------
    ops : xarray.Dataset
        Dim ``op``: one row per jaxpr equation, nested ones included (see
        ``docs/architecture.md`` for every variable). Figures are per
        execution; ``count`` says how often the op runs.
    edges : xarray.Dataset
        Dim ``edge``: ``src`` -> ``dst`` op ids and the ``bytes`` passed.
    regions : xarray.Dataset
        Dim ``region``: the region tree with totals rolled up from ops.
    lowering : xarray.Dataset
        Dim ``fusion``: the executed instructions of the optimized HLO and
        the ops each holds; ``stablehlo`` and ``hlo`` hold the texts.
    operands : xarray.Dataset
        Dim ``operand``: every op's inputs and outputs, grouped by op, with
        their ``dtype`` and ``shape`` (dims over ``axis``, -1 past ``rank``).
        ``ops["in_shapes"]`` and ``ops["out_shapes"]`` show the same as text.
        Built from that text when not given (a trace saved before it).
    jaxpr : jax.extend.core.ClosedJaxpr or None
        The traced program (``None`` after :func:`load_trace`; its text is
        kept: :attr:`jaxpr_text`).
    fn : callable or None
        The captured function (``None`` after :func:`load_trace`).
    mode : str
        ``"static"``, ``"profile"`` or ``"eager"``.
    overhead : Overhead
        The mode's measured overhead against the plain jitted call.

    Examples
    --------
    >>> import jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((4, 8)), jnp.ones((8, 2)))
    >>> int(t.total_flops())
    128
    """

    def __init__(
        self,
        ops: xr.Dataset,
        edges: xr.Dataset,
        regions: xr.Dataset,
        lowering: xr.Dataset,
        *,
        attrs: dict[str, Any],
        overhead: Overhead,
        jaxpr: Any = None,
        fn: Any = None,
        operands: xr.Dataset | None = None,
    ) -> None:
        self.ops = ops
        self.edges = edges
        self.regions = regions
        self.lowering = lowering
        self.operands = legacy_operands(ops) if operands is None else operands
        self.attrs = dict(attrs)
        self.overhead = overhead
        self.jaxpr = jaxpr
        self.fn = fn  # the captured function, in memory only (shape studies re-trace it at other sizes)

    @property
    def jaxpr_text(self) -> str:
        """The jaxpr as text (printed on demand; kept in the file by :meth:`save`)."""
        if self.jaxpr is not None:
            return str(self.jaxpr)
        return str(self.attrs.get("jaxpr_text", ""))

    @property
    def mode(self) -> str:
        """The instrumentation mode that produced this trace."""
        return self.overhead.mode

    # ---- totals ---------------------------------------------------------------
    def total_flops(self) -> int:
        """Σ flops × count over all ops."""
        return int((self.ops["flops"] * self.ops["count"]).sum())

    def total_bytes(self) -> int:
        """Σ (bytes_read + bytes_written) × count over all ops (the unfused view)."""
        return int(((self.ops["bytes_read"] + self.ops["bytes_written"]) * self.ops["count"]).sum())

    def _region_rows(self, max_depth: int | None) -> list[tuple[int, str, str, str, str, str]]:
        """(depth, name, ops, MFLOP, MB moved, time ms) per region, in tree order."""
        r = self.regions
        rows = []
        for i in range(r.sizes["region"]):
            depth = int(r["depth"][i])
            if max_depth is not None and depth > max_depth:
                continue
            name = str(r["region"][i].item())
            t = float(r["time_s"][i])
            rows.append((
                depth, name.rsplit("/", 1)[-1] if name else "<root>", str(int(r["n_ops"][i])),
                f"{float(r['flops'][i]) / 1e6:.3f}", f"{float(r['bytes_read'][i] + r['bytes_written'][i]) / 1e6:.3f}",
                "-" if np.isnan(t) else f"{t * 1e3:.3f}",
            ))
        return rows

    def region_table(self, max_depth: int | None = None) -> str:
        """The region tree as a fixed-width text table (what the CLI prints)."""
        rows = [("region", "ops", "MFLOP", "MB moved", "time ms")]
        rows += [("  " * depth + name, *rest) for depth, name, *rest in self._region_rows(max_depth)]
        widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
        lines = [
            "  ".join(cell.ljust(w) if c == 0 else cell.rjust(w)
                      for c, (cell, w) in enumerate(zip(row, widths, strict=True)))
            for row in rows
        ]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)

    # ---- persistence ----------------------------------------------------------
    def to_datatree(self) -> xr.DataTree:
        """The whole trace as one ``xarray.DataTree`` (root attrs + four children)."""
        root = xr.Dataset(attrs={**self.attrs, "jaxpr_text": self.jaxpr_text, **self.overhead.to_attrs(),
                                 "mode": self.mode})
        return xr.DataTree.from_dict({"/": root, **{f"/{p}": getattr(self, p) for p in _PARTS}})

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace to ``path`` (netCDF4; ``.zarr`` for Zarr).

        The file is written next to ``path`` and moved into place only once
        complete, so a failure never leaves a half-written result behind.
        Only a new path or a previous dfit_nb save is replaced: anything else
        there (a folder, a file dfit_nb did not write, ``.``, ``..``, the
        home directory) is refused (``docs/architecture.md``, "What save
        promises").

        Parameters
        ----------
        path : str or os.PathLike
            A new path, or the path of a previous dfit_nb save of the same kind.

        Returns
        -------
        pathlib.Path
            ``path``.

        Raises
        ------
        dfit_nb.errors.SaveRefusedError
            ``path`` holds something dfit_nb did not write; nothing is written.
        dfit_nb.errors.SaveError
            Writing failed (a full disk); the previous file at ``path`` is unchanged.
        """
        return save_tree(self.to_datatree(), path)

    # ---- display --------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"<dfit_nb.Trace {self.attrs.get('function', '?')} mode={self.mode} "
            f"ops={self.ops.sizes.get('op', 0)} regions={self.regions.sizes.get('region', 0)} "
            f"fusions={self.lowering.sizes.get('fusion', 0)} GFLOP={self.total_flops() / 1e9:.4g}>"
        )

    def _repr_html_(self) -> str:
        rows = [(depth, name, rest) for depth, name, *rest in self._region_rows(max_depth=4)]
        return render("trace.html.j2", title=repr(self), rows=rows,
                      overhead=None if self.mode == "static" else self.overhead.describe())


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Load a trace written by :meth:`Trace.save` (no code is executed on load).

    Examples
    --------
    >>> import tempfile, os, jax.numpy as jnp, dfit_nb
    >>> t = dfit_nb.capture(lambda a: a * 2, jnp.ones(3))
    >>> p = t.save(os.path.join(tempfile.mkdtemp(), "t.nc"))
    >>> dfit_nb.load_trace(p).total_flops() == t.total_flops()
    True
    """
    tree = open_tree(path, "trace", _REQUIRED)
    attrs = dict(tree.attrs)
    overhead = Overhead.from_attrs(attrs)
    attrs = {k: v for k, v in attrs.items() if not k.startswith("overhead_") and k != "mode"}
    parts = {p: tree[p].to_dataset() for p in _PARTS if p in tree.children}
    return Trace(**parts, attrs=attrs, overhead=overhead)


def legacy_operands(ops: xr.Dataset) -> xr.Dataset:
    """The ``operands`` Dataset of a trace saved before it had one: read from its ops' ``in_shapes`` and
    ``out_shapes`` texts (no op at all without them). The one place a trace's shapes text is read.

    >>> ops = xr.Dataset({"in_shapes": ("op", ["float32[4,8] float32[8,2]"]), "out_shapes": ("op", ["float32[4,2]"])},
    ...                  coords={"op": [0]})
    >>> legacy_operands(ops)["shape"].values.tolist()
    [[4, 8], [8, 2], [4, 2]]
    """
    if "in_shapes" not in ops or "out_shapes" not in ops:
        return _operands.operands_dataset([], [], [])
    op = ops["op"].values if "op" in ops.coords else np.arange(ops.sizes.get("op", 0))
    return _operands.from_text(op, ops["in_shapes"].values, ops["out_shapes"].values, "trace.ops column")
