"""A property test of the replay (hypothesis): random valid machines, every field drawn, and random small
programs give finite, non-negative times, bytes and energies, and every conservation law holds.

The tile grid and execution style are static in the compiled replay (each pair compiles once), so they are drawn
from a few; every other field is traced and drawn freely. Programs are chains of one to three GEMMs with an
elementwise op between, drawn dims and dtype, captured once per draw (small, so capture is quick)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dfit_nb
from dfit_nb.events.schema import KINDS
from dfit_nb.sim import Hardware

LEVELS = ("sram", "noc", "dram", "retile")


@st.composite
def machines(draw: st.DrawFn) -> Hardware:
    """Valid machines: every Hardware field drawn within its valid range (energies and latencies included)."""
    rows, cols = draw(st.sampled_from([(1, 1), (2, 3)]))
    sram = st.integers(1024, 2 * 1024 * 1024)
    bandwidth = st.floats(0.5, 1024.0)
    share = st.floats(0.0, 1.0)
    energy = st.floats(0.0, 100.0)
    return Hardware(
        tile_rows=rows, tile_cols=cols, execution=draw(st.sampled_from(["time", "spatial"])),
        pe_rows=draw(st.integers(1, 64)), pe_cols=draw(st.integers(1, 64)),
        sram_input_bytes=draw(sram), sram_weight_bytes=draw(sram), sram_output_bytes=draw(sram),
        word_bytes=draw(st.sampled_from([1, 2, 4, 8])), vector_lanes=draw(st.integers(1, 256)),
        accumulator_bytes=draw(st.sampled_from([0, 1, 2, 4, 8])),
        noc_link_bytes_per_cycle=draw(bandwidth), noc_hop_cycles=draw(st.floats(0.0, 20.0)),
        dram_bytes_per_cycle=draw(bandwidth), dram_latency_cycles=draw(st.floats(0.0, 2000.0)),
        clock_ghz=draw(st.floats(0.1, 4.0)), op_overhead_cycles=draw(st.floats(0.0, 1000.0)),
        fold_overlap=draw(share), memory_overlap=draw(share),
        mac_pj_1=draw(energy), mac_pj_2=draw(energy), mac_pj_4=draw(energy), rf_pj_per_byte=draw(energy),
        sram_pj_per_byte=draw(energy), noc_pj_per_byte_hop=draw(energy), dram_pj_per_byte=draw(energy),
    )


programs = st.tuples(st.lists(st.integers(1, 160), min_size=3, max_size=5),
                     st.sampled_from(["float32", "bfloat16"]), st.integers(1, 3))


@functools.cache
def _trace(dims: tuple[int, ...], dtype: str, count: int):
    """A chain of GEMMs ``x @ w1 -> tanh -> @ w2 ...`` over ``dims``, inside a scan of ``count`` steps when
    ``count > 1`` (ops that run several times)."""
    def chain(x, *ws):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x

    def fn(x, *ws):
        if count == 1:
            return chain(x, *ws)
        return jax.lax.scan(lambda c, _: (c, chain(c, *ws)), x, None, length=count)[1]

    dt = jnp.dtype(dtype)
    shapes = [(dims[0], dims[1])] + [(dims[i], dims[i + 1]) for i in range(1, len(dims) - 1)]
    return dfit_nb.capture(fn, *(jax.ShapeDtypeStruct(s, dt) for s in shapes))


def _kind(run, kind: str, var: str) -> float:
    ev = run.events
    sel = (ev["kind"].values == kind) & (ev["source"].values == "simulated")
    return float(ev[var].values[sel].sum())


@pytest.mark.filterwarnings("ignore::dfit_nb.sim.SpillWarning")  # tiny SRAMs spill: expected
@settings(max_examples=16, suppress_health_check=[HealthCheck.too_slow])
@given(hw=machines(), program=programs, dataflow=st.sampled_from(["ws", "os", "is"]))
def test_random_machines_and_programs_replay_finite_non_negative_and_conserved(hw, program, dataflow):
    dims, dtype, count = program
    trace = _trace(tuple(dims), dtype, count)
    run = dfit_nb.replay(trace, hw, dataflow, time_bins=16)
    ops, ev, s = run.ops, run.events, run.summary
    # finite and non-negative everywhere a number is
    for part in (ops, ev, s, run.cube):
        for name, var in part.data_vars.items():
            if var.dtype.kind == "f":
                values = var.values
                assert np.isfinite(values).all(), name
                if name not in ("tile_offset",):
                    assert (values >= -1e-9 * max(1.0, float(np.abs(values).max()))).all(), name
    assert float(s["latency_cycles"]) > 0 and float(s["latency_s"]) > 0
    # time: every op starts when its inputs are ready and ends after it starts; the latency is the last end
    assert (ops["end"].values >= ops["start"].values).all()
    assert (ops["start"].values >= ops["ready"].values - 1e-6).all()
    assert float(s["latency_cycles"]) == pytest.approx(float(ops["end"].max()), rel=1e-12)
    sim = ev.sel(event=ev["source"] == "simulated")
    assert (sim["end"].values >= sim["start"].values).all() and (sim["start"].values >= 0).all()
    assert float(sim["end"].max()) <= float(s["latency_cycles"]) * (1 + 1e-12)
    # work: the MACs of the compute events are the program's GEMMs', every execution
    gemm_macs = float((trace.ops["m"] * trace.ops["k"] * trace.ops["n"] * trace.ops["batch"]
                       * trace.ops["count"]).where(trace.ops["container"] == "").sum())
    assert _kind(run, "compute", "macs") == pytest.approx(gemm_macs, rel=1e-9)
    assert float(s["macs"]) == pytest.approx(gemm_macs, rel=1e-9)
    # bytes and energy: events sum to the op totals, op totals to the summary, levels to the whole
    for kind in LEVELS:
        assert _kind(run, kind, "bytes") == pytest.approx(float(ops[f"bytes_{kind}"].sum()), rel=1e-9, abs=1e-6)
    for kind in KINDS:
        assert _kind(run, kind, "energy_pj") == pytest.approx(float(ops[f"energy_{kind}_pj"].sum()), rel=1e-9,
                                                              abs=1e-6)
    total_pj = float(ops["energy_pj"].sum())
    assert float(ev["energy_pj"].values[ev["source"].values == "simulated"].sum()) == pytest.approx(total_pj,
                                                                                                     rel=1e-9)
    assert float(s["energy_j"]) * 1e12 == pytest.approx(total_pj, rel=1e-9, abs=1e-6)
    # the cube: busy is a fraction, its energy over time is the run's
    assert float(run.cube["busy"].max()) <= 1 + 1e-9
    assert float(run.cube["energy_pj"].sum()) == pytest.approx(total_pj, rel=1e-9, abs=1e-6)
    assert 0 <= float(s["utilization"]) <= 1 + 1e-12
