"""``Run``: a replay's events, cube, summary, per-op and per-region tables; saved without pickle.

Built on the host from the per-op records of :func:`dfit_nb.sim._replay.program`
with NumPy, vectorized over events (no Python loop over ops, tiles or events).

The bottleneck classification of the ops, regions and summary (mechanisms, evidence, classes) is
:mod:`dfit_nb.sim._bottlenecks`, whose docstring defines it; the Datasets a replay builds are
:mod:`dfit_nb.sim._run_tables`. Their public names are importable from here too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
import xarray as xr

from .._files import open_tree, save_tree, text_as_objects
from .._html import render
from .._version import __version__
from ..events.schema import events_dataset
from . import streaming
from ._bottlenecks import BOTTLENECKS as BOTTLENECKS
from ._bottlenecks import CLASSES as CLASSES
from ._bottlenecks import MECHANISMS as MECHANISMS
from ._bottlenecks import MEMORY_MECHANISMS as MEMORY_MECHANISMS
from ._bottlenecks import _classified, _extra_cycles, _var
from ._bottlenecks import classify as classify
from ._cost import hardware_attrs
from ._run_tables import OPERAND_BYTES as OPERAND_BYTES
from ._run_tables import cube_dataset as cube_dataset
from ._run_tables import expand_events as expand_events
from ._run_tables import kernel_vars as kernel_vars
from ._run_tables import level_totals as level_totals
from ._run_tables import link_names as link_names
from ._run_tables import op_kernels as op_kernels
from ._run_tables import operand_bytes as operand_bytes
from ._run_tables import ops_dataset as ops_dataset
from ._run_tables import regions_dataset as regions_dataset
from ._run_tables import roof_variables as roof_variables
from ._run_tables import stream_variables as stream_variables
from ._run_tables import summary_dataset as summary_dataset
from .hardware import Hardware

_PARTS = ("events", "cube", "summary", "ops", "regions")


def provenance(trace: Any, hw: Hardware, policy: str, execution: str, fusion: str = "") -> dict[str, Any]:
    """What a saved result needs to be reproduced and compared: versions, machine, program, policy."""
    t = getattr(trace, "attrs", {})
    return {
        "dfit_nb_version": __version__, "jax_version": jax.__version__,
        "function": str(t.get("function", "")), "arg_shapes": str(t.get("arg_shapes", "")),
        "trace_mode": str(getattr(trace, "mode", "")), "dataflow": policy, "execution": execution,
        "clock_ghz": float(np.asarray(hw.clock_ghz)), **hardware_attrs(hw),
        "fusion": fusion,
    }


def build_run(trace: Any, prep: Any, out: dict[str, np.ndarray], hw: Hardware, codes: np.ndarray, policy: str,
              execution: str, *, time_bins: int, inferences: int, measured: bool | None) -> Run:
    """Assemble the :class:`Run` of one replay."""
    attrs = provenance(trace, hw, policy, execution, prep.fusion)
    clock = attrs["clock_ghz"]
    cols = expand_events(prep, out, hw, codes)
    events = events_dataset(cols, clock_ghz=clock, attrs=attrs)
    if measured is None:
        measured = "time_s" in prep.table and bool(np.isfinite(prep.table["time_s"].values).any())
    if measured:
        from ..events.measured import measured_events
        from ..events.schema import concat

        events = concat(events, measured_events(trace))
        events.attrs = attrs
    ops = ops_dataset(prep, out, codes, attrs)
    regions = regions_dataset(trace, prep, ops, attrs)
    cube = cube_dataset(prep, out, ops, events, hw, regions, time_bins, attrs)
    summary = summary_dataset(ops, events, hw, inferences, attrs, streaming.of_ops(ops, hw, inferences))
    ops, regions, summary = _classified(ops, regions, summary)
    cube = text_as_objects(cube)
    return Run(events=events, cube=cube, summary=summary, ops=ops, regions=regions, attrs=attrs)


#: the provenance attrs that name the program a run replayed (the function and its argument shapes)
PROGRAM_ATTRS = ("function", "arg_shapes")


def _same_attr(a: Any, b: Any) -> bool:
    """Two provenance attrs name the same thing: numbers by value (a file gives 4 back as 4.0 or ``np.int64``),
    anything else by its text."""
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


class Run:
    """A replay: events, the tile x time cube, the summary, per-op and per-region results.

    Attributes
    ----------
    events : xarray.Dataset
        Dim ``event`` (:mod:`dfit_nb.events.schema`): one row per (op, tile, kind).
    cube : xarray.Dataset
        ``busy`` and ``sram_occupancy`` over (``time``, ``tile_y``, ``tile_x``),
        ``link_load`` over (``time``, ``link``), ``power_w`` over ``time``,
        ``traffic`` over (``region``, ``tensor``, ``level``).
    summary : xarray.Dataset
        Scalars: ``latency_cycles``, ``latency_s``, ``energy_j``,
        ``joules_per_inference``, ``utilization``, traffic by level, ``bottleneck``.
    ops : xarray.Dataset
        Dim ``op``: the mapping (virtual layout, physical tiles, ``transform``),
        timing, traffic, energy, ``bottleneck`` and ``evidence``, and the
        ``kernel`` each op ran in.
    kernels : xarray.Dataset
        Dim ``kernel``: the ops rolled up to the kernels the chip ran (a property).
    regions : xarray.Dataset
        Dim ``region`` (inclusive): totals, span, ``bottleneck``, ``evidence``.
    attrs : dict
        Provenance (also on every Dataset).
    """

    def __init__(self, *, events: xr.Dataset, cube: xr.Dataset, summary: xr.Dataset, ops: xr.Dataset,
                 regions: xr.Dataset, attrs: dict[str, Any]) -> None:
        self.events, self.cube, self.summary, self.ops, self.regions = events, cube, summary, ops, regions
        self.attrs = dict(attrs)

    @property
    def kernels(self) -> xr.Dataset:
        """The kernels the chip ran (:mod:`dfit_nb.sim.kernels`), dim ``kernel``: member ops, start, end, bytes
        per level, energy, launch cycles, bottleneck (:func:`dfit_nb.sim._kernel_table.kernels_dataset`)."""
        from ._kernel_table import kernels_dataset

        return kernels_dataset(self.ops)

    @property
    def mapping(self) -> xr.Dataset:
        """The virtual -> physical transformation per op (like capture's lowering map)."""
        return self.ops[["region", "primitive", "layout", "gy", "gx", "virtual_tiles", "alloc", "tiles",
                         "tile_offset", "section", "fold", "spilled_bytes", "out_onchip", "transform"]]

    def streamed(self, inferences: int) -> xr.Dataset:
        """The summary's streaming scalars for ``inferences`` streamed back to back (throughput, steady-state
        utilisation and period, fill, the pacing stage), from this run's per-op records
        (:mod:`dfit_nb.sim.streaming`): what ``replay(..., inferences=...)`` gives, without replaying.

        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
        >>> run = dfit_nb.replay(t, presets.get("npu_like"))
        >>> s = run.streamed(10)
        >>> round(float(s["stream_s"] / run.summary["latency_s"]), 9)   # time-multiplexed: one after another
        10.0
        """
        from ._prepare import ReplayError
        from .hardware import from_provenance

        # ReplayError, as replay(..., inferences=0) raises for the same figures (a ValueError too)
        if not isinstance(inferences, (int, np.integer)) or isinstance(inferences, bool) or inferences < 1:
            raise ReplayError(f"inferences must be a whole number >= 1, got {inferences!r}")
        hw = from_provenance(self.attrs)
        data = stream_variables(streaming.of_ops(self.ops, hw, int(inferences)), self.ops,
                                float(self.attrs["clock_ghz"]) * 1e9)
        return xr.Dataset({**data, "inferences": _var((), int(inferences), "1", "inferences streamed")},
                          attrs=self.attrs)

    def thermal(self, inferences: int = 1000, **options: Any) -> xr.Dataset:
        """Temperatures and throttling of ``inferences`` calls back to back (:func:`dfit_nb.sim.thermal`)."""
        from ._thermal import thermal

        return thermal(self, inferences, **options)

    def with_thermal(self, analysis: xr.Dataset) -> Run:
        """A copy whose ``thermal`` bottleneck class carries ``analysis`` (from :meth:`thermal`): each op's
        ``thermal_cycles``, the cycles throttling added to its span per call.

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), presets.get("npu_like"))
        >>> hw = presets.get("npu_like").replace(thermal_resistance_k_per_w=1e3, heat_capacity_j_per_k=1e-6,
        ...                                      throttle_clock_factor=0.25)  # a toy machine that overheats
        >>> hot = run.with_thermal(run.thermal(10**5, steps=64, hw=hw))
        >>> hot.summary["bottleneck"].item(), run.summary["bottleneck"].item()
        ('thermal', 'dram')
        """
        from ._thermal import ThermalError

        if not isinstance(analysis, xr.Dataset) or "thermal_cycles" not in analysis or "op" not in analysis.dims:
            raise ThermalError(f"analysis must be the Dataset of Run.thermal / dfit_nb.sim.thermal (with "
                               f"'thermal_cycles' over 'op'), got {describe_type(analysis)}")
        ops = self.ops["op"].values
        if not np.array_equal(np.asarray(analysis["op"].values, dtype=str), np.asarray(ops, dtype=str)):
            raise ThermalError("the thermal analysis is of another run (its ops differ): run it on this one")
        # the same program replayed on another machine or dataflow has the same ops: the analysis keeps the
        # provenance of the run it was made of (thermal() copies its attrs), which must be this run's
        keys = (*PROGRAM_ATTRS, "dataflow", "execution", "hardware")
        differ = [k for k in analysis.attrs if (k in keys or k.startswith("hw_")) and k in self.attrs
                  and not _same_attr(analysis.attrs[k], self.attrs[k])]
        if differ:
            shown = "; ".join(f"{k} {analysis.attrs[k]!r}, this run's {self.attrs[k]!r}" for k in differ[:3])
            raise ThermalError(f"the thermal analysis is of another run ({shown}): run thermal() on this one")
        return self._with_cycles("thermal_cycles", analysis["thermal_cycles"].values)

    def with_precision(self, narrower: Run) -> Run:
        """A copy whose ``precision`` bottleneck class carries the time the word width costs: per op, the span
        this run spends beyond ``narrower``'s (the same program priced at a narrower word, e.g.
        ``dfit_nb.replay(trace, hw.replace(word_bytes=1))``), never below 0.

        Examples
        --------
        >>> import jax.numpy as jnp, dfit_nb
        >>> from dfit_nb.sim import presets
        >>> trace = dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64)))
        >>> wide = dfit_nb.replay(trace, presets.get("eyeriss_like"))  # 2-byte words
        >>> narrow = dfit_nb.replay(trace, presets.get("eyeriss_like").replace(word_bytes=1))
        >>> round(float(wide.with_precision(narrow).summary["class_evidence"].sel(mechanism_class="precision")), 2)
        0.49
        """
        if not isinstance(narrower, Run):
            raise ValueError(f"narrower must be a Run (the same program at a narrower word), got "
                             f"{type(narrower).__name__}")
        if not self.comparable(narrower) or not np.array_equal(np.asarray(narrower.ops["op"].values, dtype=str),
                                                                 np.asarray(self.ops["op"].values, dtype=str)):
            raise ValueError("narrower replays another program (function, argument shapes or ops differ): replay "
                             "the same trace at the narrower word")
        saved = np.maximum(self.ops["span"].values - narrower.ops["span"].values, 0.0)
        return self._with_cycles("precision_cycles", saved)

    def _with_cycles(self, name: str, cycles: np.ndarray) -> Run:
        ops = self.ops.copy()
        zeros = np.zeros(ops.sizes["op"])
        # a run saved before the bottleneck classes has neither: start both from "not analysed"
        ops = ops.assign({k: v for k, v in _extra_cycles(("op",), zeros, zeros).items() if k not in ops})
        ops[name] = (("op",), np.asarray(cycles, dtype=np.float64), dict(ops[name].attrs))
        ops, regions, summary = _classified(ops, self.regions, self.summary)
        return Run(events=self.events, cube=self.cube, summary=summary, ops=ops, regions=regions, attrs=self.attrs)

    def comparable(self, other: Run) -> bool:
        """True when both runs replay the same program (function and argument shapes)."""
        return all(self.attrs.get(k) == other.attrs.get(k) for k in PROGRAM_ATTRS)

    def differs_from(self, trace: Any) -> str:
        """``""`` when every op this run replayed is ``trace``'s op of the same id and primitive, else the first op
        that is not, in words: a trace of another program (two lambdas of the same argument shapes pass
        :meth:`comparable`) would have its ops read as this run's."""
        mine = trace.ops["op"].values.tolist()
        prim = dict(zip(mine, (str(v) for v in trace.ops["primitive"].values), strict=True))
        for op, p in zip(self.ops["op"].values.tolist(), (str(v) for v in self.ops["primitive"].values),
                         strict=True):
            if prim.get(op) != p:
                theirs = f"is {prim[op]!r} in the trace" if op in prim else "is not in the trace"
                return f"op {op} is {p!r} in the run and {theirs}"
        return ""

    def to_datatree(self) -> xr.DataTree:
        """The run as one ``xarray.DataTree``."""
        return xr.DataTree.from_dict({"/": xr.Dataset(attrs=self.attrs),
                                      **{f"/{p}": getattr(self, p) for p in _PARTS}})

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write to ``path`` (netCDF4; a ``.zarr`` path for Zarr), atomically."""
        return save_tree(self.to_datatree(), path)

    def to_perfetto(self, path: str | os.PathLike[str], **options: Any) -> Path:
        """Chrome trace-event JSON for Perfetto UI / chrome://tracing (see :func:`dfit_nb.events.perfetto`), with a
        ``kernels`` track above the tiles' (:attr:`kernels`).

        A file at ``path`` that dfit_nb did not write is refused (:class:`dfit_nb.errors.SaveRefusedError`, before
        any work) unless ``overwrite=True`` is passed; a trace dfit_nb wrote is replaced. ``chip``, ``link_load``
        and ``kernels`` default to the run's own and may be given (``chip="my npu"``); a ``clock_ghz`` other than
        the run's is refused by the export, naming both."""
        from ..events.perfetto import to_perfetto

        # the run's own figures, as defaults the caller may override (chip="my npu")
        options.setdefault("kernels", self.kernels)
        options.setdefault("chip", self.attrs["hardware"])
        options.setdefault("link_load", self.cube["link_load"])
        options.setdefault("clock_ghz", self.attrs["clock_ghz"])
        return to_perfetto(self.events, path, **options)

    def __repr__(self) -> str:
        s = self.summary
        return (f"<dfit_nb.Run {self.attrs.get('function', '?')} on {self.attrs.get('hardware')} "
                f"({self.attrs.get('execution')}, {self.attrs.get('dataflow')}): "
                f"{float(s['latency_s']) * 1e6:.4g} us, {float(s['energy_j']) * 1e3:.4g} mJ, "
                f"util {float(s['utilization']):.1%}, bottleneck {s['bottleneck'].item()}, "
                f"{int(s['n_events'])} events>")

    def _repr_html_(self) -> str:
        s = self.summary
        rows = [
            ("latency", f"{float(s['latency_cycles']):,.0f} cycles = {float(s['latency_s']) * 1e6:.4g} us"),
            ("energy", f"{float(s['energy_j']) * 1e3:.4g} mJ ({float(s['joules_per_inference']) * 1e3:.4g} mJ per "
                       "inference)"),
            ("utilization", f"{float(s['utilization']):.2%}"),
            ("traffic", ", ".join(f"{k} {float(s[f'{k}_bytes']) / 1e6:.3g} MB"
                                  for k in ("sram", "noc", "retile", "dram"))),
            ("bottleneck", f"{s['bottleneck'].item()} ("
             + ", ".join(f"{m} {float(v):.0%}" for m, v in zip(MECHANISMS, s["evidence"].values, strict=True))
             + "".join(f", {c} {float(s['class_evidence'].sel(mechanism_class=c)):.0%}"
                       for c in ("precision", "thermal") if _analysed(s, c))
             + ")"),
            ("events", f"{int(s['n_events']):,}"),
        ]
        return render("key_values.html.j2", title=repr(self), rows=rows)


def describe_type(obj: Any) -> str:
    """``obj`` as an error names it: an ``xarray.Dataset`` with its variables, else its type."""
    if isinstance(obj, xr.Dataset):
        return f"a Dataset of {', '.join(map(str, list(obj.data_vars)[:6]))}{', ...' if len(obj.data_vars) > 6 else ''}"
    return type(obj).__name__


def _analysed(summary: xr.Dataset, cls: str) -> bool:
    """Whether the run carries a ``cls`` analysis (precision and thermal are shown once attached)."""
    return "class_evidence" in summary and float(summary[f"{cls}_cycles"]) > 0


def load_run(path: str | os.PathLike[str]) -> Run:
    """Load a run written by :meth:`Run.save` (no code is executed on load).

    Examples
    --------
    >>> import os, tempfile, jax.numpy as jnp, dfit_nb
    >>> from dfit_nb.sim import presets
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((32, 32))), presets.get("npu_like"))
    >>> back = dfit_nb.load_run(run.save(os.path.join(tempfile.mkdtemp(), "r.nc")))
    >>> back.events.identical(run.events)
    True
    """
    tree = open_tree(path, "run", _PARTS, foreign={"lowering": "it looks like a trace: use dfit_nb.load_trace"})
    parts = {p: tree[p].to_dataset() for p in _PARTS}
    return Run(**parts, attrs=dict(tree.attrs))
