"""Die area and average power of a machine: ``area(hw)`` in mm^2 at 7 nm, ``power(result)`` in W.

The area model
--------------
A machine's die is the sum of five parts, each a count from its fields times one per-component figure of
:data:`AREA_FIGURES` (every figure at a 7 nm-class process, each with its public source; docs/design.md tables
them):

* ``pe``: ``tiles x pe_rows x pe_cols`` multiply-accumulate units of the datapath's word (``word_bytes``), each a
  transistor count over the node's logic density;
* ``vector``: ``tiles x vector_lanes`` fp32 lanes;
* ``sram``: every tile's three buffers, ``sram_*_bytes``, at the density of a 7 nm SRAM macro;
* ``noc``: one mesh router (and its links) per tile, sized by the link width ``noc_link_bytes_per_cycle``;
* ``dram``: the DRAM PHYs and controllers, in proportion to the DRAM bandwidth (``dram_bytes_per_cycle x
  clock_ghz``), at an HBM2e stack's figures.

What the model leaves out (pads, PCIe and chip-to-chip links, the scalar core and control, the whitespace of a
floorplan) is left out of every machine alike. Each part is a product and a sum of the fields, so the area is
smooth in the continuous ones (bandwidths, clock) and in a relaxation of the whole-number ones (the search of
:func:`dfit_nb.sim.design` reads it at fractional PE counts); it is written for ``jax.numpy``, so a traced machine
gives a traced area.

Power
-----
:func:`power` is a replay's energy over its latency: the average dynamic power of one call, in W. The clock is in
it through the latency (``latency_s = latency_cycles / clock``). No static (leakage) power is modelled, as in
:func:`dfit_nb.sim.thermal`.

>>> from dfit_nb.sim import presets
>>> round(area(presets.get("tpu_v4")))
377
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from ..errors import DfitError
from .hardware import Hardware, check_hardware


class AreaError(DfitError, ValueError):
    """Bad input to :func:`area` or :func:`power`."""


#: name -> (value, unit, source). Every figure at a 7 nm-class process.
AREA_FIGURES: dict[str, tuple[float, str, str]] = {
    "logic_mtr_per_mm2": (96.3, "MTr/mm^2", "7 nm logic density: Khan and Mann, 'AI Chips: What They Are and Why "
                          "They Matter', CSET 2020 (the figure LLMCompass's area model uses at 7 nm: Zhang et al., "
                          "ISCA 2024, cost_model/supply_chain)"),
    "mac_transistors_1": (11_106.0, "transistors", "an int8 MAC: LLMCompass's int32 multiplier (177,690 transistors, "
                          "from Ariane and OpenPiton) scaled by (8/32)^2, LLMCompass's own rule that a multiplier "
                          "grows with the square of its operand width"),
    "mac_transistors_2": (25_345.0, "transistors", "a 16-bit floating-point MAC: LLMCompass's fp64 FPU (685,300 "
                          "transistors) scaled by (10/52)^2, the squared mantissa ratio (LLMCompass models each PE's "
                          "MAC as an FPU of the word)"),
    "mac_transistors_4": (134_070.0, "transistors", "an fp32 MAC: the fp64 FPU scaled by (23/52)^2 (LLMCompass)"),
    "mac_transistors_8": (685_300.0, "transistors", "an fp64 MAC: LLMCompass's fp64 FPU (Ariane, OpenPiton SPARC T1)"),
    "lane_transistors": (134_070.0, "transistors", "one vector lane: an fp32 FPU, as LLMCompass's vector units"),
    "sram_mm2_per_mib": (1.3325, "mm^2/MiB", "TSMC's 7 nm 256 Mib SRAM test chip on a 42.64 mm^2 die (0.027 um^2 "
                         "bit cells, periphery and I/O included): Chang et al., 'A 7nm 256Mb SRAM in high-k "
                         "metal-gate FinFET technology', ISSCC 2017 -> 42.64 / 32 MiB"),
    "router_transistors": (44.3e6, "transistors", "one tile's connection to the on-chip network: LLMCompass's "
                           "per-core crossbar attachment (from the A100 and MI210 die shots)"),
    "router_bytes_per_cycle": (47.4, "B/cycle", "the link width the router figure carries: LLMCompass's A100 "
                               "template, 5,120 B/cycle of global-buffer bandwidth over 108 cores; a router "
                               "scales linearly with its link width from there (an assumption)"),
    "dram_phy_mm2": (10.45, "mm^2", "one HBM2e PHY (a 1024-bit stack interface; PHYs do not shrink with the node): "
                     "LLMCompass, cost_model"),
    "dram_controller_transistors": (552.743e6, "transistors", "one HBM2e memory controller: LLMCompass, cost_model"),
    "dram_gb_per_s": (409.6, "GB/s", "one HBM2e stack interface, 1024 pins x 3.2 Gb/s (LLMCompass's HBM2e "
                      "channel); a machine's PHYs and controllers are its DRAM bandwidth over this, fractional"),
}

#: the process node every figure is at
NODE_NM = 7

#: the parts of :func:`area`, in its breakdown's order
PARTS = ("pe", "vector", "sram", "noc", "dram")

#: published die areas of chips a preset models: preset -> (mm^2, how it is bounded, source)
DIE_AREAS = {
    "tpu_v4": (600.0, "<", "Jouppi et al., 'TPU v4: An Optically Reconfigurable Supercomputer for Machine Learning "
               "with Hardware Support for Embeddings', ISCA 2023, Table 1: die < 600 mm^2, 7 nm"),
}


def _figure(name: str) -> float:
    return AREA_FIGURES[name][0]


def parts_mm2(hw: Hardware, xp: Any = jnp) -> dict[str, Any]:
    """The five parts of ``hw``'s die in mm^2 (``xp``: ``jax.numpy`` for a traced machine, ``numpy`` for a batch
    of arrays), each broadcast over ``hw``'s batch."""
    mtr = _figure("logic_mtr_per_mm2") * 1e6  # transistors per mm^2
    tiles = xp.asarray(hw.tile_rows) * xp.asarray(hw.tile_cols)
    word = xp.asarray(hw.word_bytes)
    mac = xp.where(word <= 1, _figure("mac_transistors_1"),
                   xp.where(word <= 2, _figure("mac_transistors_2"),
                            xp.where(word <= 4, _figure("mac_transistors_4"), _figure("mac_transistors_8"))))
    sram = (xp.asarray(hw.sram_input_bytes) + xp.asarray(hw.sram_weight_bytes) + xp.asarray(hw.sram_output_bytes))
    gb_per_s = xp.asarray(hw.dram_bytes_per_cycle) * xp.asarray(hw.clock_ghz)
    stack = _figure("dram_phy_mm2") + _figure("dram_controller_transistors") / mtr
    return {
        "pe": tiles * xp.asarray(hw.pe_rows) * xp.asarray(hw.pe_cols) * mac / mtr,
        "vector": tiles * xp.asarray(hw.vector_lanes) * _figure("lane_transistors") / mtr,
        "sram": tiles * sram / 2.0 ** 20 * _figure("sram_mm2_per_mib"),
        "noc": tiles * _figure("router_transistors") / mtr * xp.asarray(hw.noc_link_bytes_per_cycle)
        / _figure("router_bytes_per_cycle"),
        "dram": gb_per_s / _figure("dram_gb_per_s") * stack,
    }


def area_mm2(hw: Hardware, xp: Any = jnp) -> Any:
    """The die area of ``hw`` in mm^2, unchecked (a traced machine inside ``jit``/``grad``)."""
    return sum(parts_mm2(hw, xp).values())


def area(hw: Hardware, breakdown: bool = False) -> Any:
    """Die area of a machine in mm^2, at 7 nm, from per-component figures (:data:`AREA_FIGURES`).

    Parameters
    ----------
    hw : Hardware
        One machine or a batch (array fields).
    breakdown : bool
        ``True``: a dict of the parts (``pe``, ``vector``, ``sram``, ``noc``, ``dram``) and ``total``.

    Returns
    -------
    float, numpy.ndarray or dict
        The total (a float for one machine, an array over a batch), or the breakdown.

    Examples
    --------
    >>> from dfit_nb.sim import Hardware
    >>> hw = Hardware(pe_rows=32, pe_cols=32, word_bytes=1, sram_input_bytes=2**19, sram_weight_bytes=2**18,
    ...               sram_output_bytes=2**18, vector_lanes=1, noc_link_bytes_per_cycle=47.4,
    ...               dram_bytes_per_cycle=409.6, clock_ghz=1.0)
    >>> parts = area(hw, breakdown=True)
    >>> round(parts["pe"], 4), parts["sram"], round(parts["dram"], 2)  # 1024 x 11,106 / 96.3e6; 1 MiB; 1 stack
    (0.1181, 1.3325, 16.19)
    """
    check_hardware(hw, "area()", batch=None, error=AreaError)
    parts = {k: np.asarray(v, np.float64) for k, v in parts_mm2(hw, np).items()}
    parts["total"] = sum(parts.values())
    out = {k: float(v) if v.ndim == 0 else v for k, v in parts.items()}
    return out if breakdown else out["total"]


def power(result: Any = None, *, energy_j: Any = None, latency_s: Any = None) -> Any:
    """Average dynamic power of one call in W: its energy over its latency.

    Parameters
    ----------
    result : Run or xarray.Dataset, optional
        A replay (its ``summary``) or a ``replay_batch`` Dataset: read ``energy_j`` and ``latency_s`` from it.
    energy_j, latency_s : float or array_like, optional
        The two figures themselves (instead of ``result``).

    Returns
    -------
    float, numpy.ndarray or xarray.DataArray
        Watts, shaped like the inputs.

    Examples
    --------
    >>> power(energy_j=2e-3, latency_s=1e-4)
    20.0
    >>> import jax.numpy as jnp, dfit_nb
    >>> run = dfit_nb.replay(dfit_nb.capture(lambda a: a @ a, jnp.ones((64, 64))), dfit_nb.sim.presets.get("npu_like"))
    >>> bool(power(run) > 0)
    True
    """
    if result is not None:
        if energy_j is not None or latency_s is not None:
            raise AreaError("power() takes a result or energy_j= and latency_s=, not both")
        data = getattr(result, "summary", result)
        missing = [v for v in ("energy_j", "latency_s") if v not in getattr(data, "data_vars", ())]
        if missing:
            raise AreaError(f"power() needs a Run or a Dataset with energy_j and latency_s; "
                            f"{type(result).__name__} lacks {', '.join(missing)}")
        # the result's figures are checked as given ones are: a latency of 0 (no work) would be nan W
        _check_power_inputs(data["energy_j"].values, data["latency_s"].values, f"{type(result).__name__}'s ")
        out = data["energy_j"] / data["latency_s"]
        return float(out) if out.ndim == 0 else out
    if energy_j is None or latency_s is None:
        raise AreaError("power() needs a Run, a replay_batch Dataset, or both energy_j= and latency_s=")
    e, t = _check_power_inputs(energy_j, latency_s, "")
    out = e / t
    return float(out) if out.ndim == 0 else out


def _check_power_inputs(energy_j: Any, latency_s: Any, whose: str) -> tuple[np.ndarray, np.ndarray]:
    """``energy_j`` and ``latency_s`` as float arrays, or an AreaError: a negative or nan energy would be
    returned as a negative or nan power, a latency of 0 as an infinite one."""
    try:
        e, t = np.asarray(energy_j, np.float64), np.asarray(latency_s, np.float64)
    except (TypeError, ValueError):
        raise AreaError(f"power(): {whose}energy_j and latency_s must be numbers, got {energy_j!r} and "
                        f"{latency_s!r}") from None
    if np.any(~np.isfinite(t)) or np.any(t <= 0):
        raise AreaError(f"power(): {whose}latency_s must be finite and > 0 s, got {latency_s!r}")
    if np.any(~np.isfinite(e)) or np.any(e < 0):
        raise AreaError(f"power(): {whose}energy_j must be finite and >= 0 J, got {energy_j!r}")
    return e, t


__all__ = ("AREA_FIGURES", "AreaError", "area", "power")
