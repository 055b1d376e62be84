"""Hardware: a validated pytree; presets: a documented registry."""

from __future__ import annotations

import math

import jax
import numpy as np
import pandas as pd
import pytest

from dfit_nb.sim import Hardware, HardwareError, presets
from dfit_nb.sim.hardware import FIELDS


def test_hardware_is_a_pytree_and_vmaps_over_a_batch_of_machines():
    hw = Hardware(pe_rows=np.array([8, 16, 32]), pe_cols=np.array([8, 16, 32]),
                  **{f: np.full(3, getattr(Hardware(), f)) for f in ("tile_rows", "tile_cols")})
    leaves = jax.tree.leaves(hw)
    assert len(leaves) == len(FIELDS) == 39
    batched = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (3,)), hw)
    peak = jax.vmap(lambda h: h.peak_macs_per_cycle)(batched)
    assert peak.tolist() == [64, 256, 1024]


def test_replace_and_describe():
    hw = presets.get("tpu_like")
    assert hw.replace(pe_rows=64).pe_rows == 64 and hw.pe_rows == 128
    text = hw.describe()
    assert "tpu_like" in text and "dram_bytes_per_cycle" in text and "B/cycle" in text
    with pytest.raises(HardwareError, match="no field"):
        hw.replace(pe=64)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("pe_rows", 0, r"pe_rows = 0 is out of range: it must be >= 1"),
        ("pe_rows", -4, r"pe_rows = -4 is out of range"),
        ("pe_cols", 2.5, r"pe_cols must be a whole number"),
        ("dram_bytes_per_cycle", math.nan, r"dram_bytes_per_cycle must be finite"),
        ("noc_link_bytes_per_cycle", math.inf, r"noc_link_bytes_per_cycle must be finite"),
        ("clock_ghz", 0.0, r"clock_ghz = 0.0 is out of range: it must be > 0"),
        ("dram_bytes_per_cycle", -1.0, r"it must be > 0"),
        ("sram_weight_bytes", 10, r"sram_weight_bytes = 10 B is too small"),
        ("word_bytes", "bf16", r"word_bytes must be a number"),
    ],
)
def test_invalid_fields_are_named_with_value_and_range(field, value, match):
    with pytest.raises(HardwareError, match=match):
        Hardware(**{field: value})


def test_every_preset_documents_what_it_approximates_and_its_sources():
    assert set(presets.names()) >= {"tpu_like", "cerebras_like", "sambanova_like", "npu_like", "eyeriss_like",
                                    "scalesim_32", "scalesim_128"}
    for name in presets.names():
        info = presets.info(name)
        assert info.hardware.name == name
        assert len(info.approximates) > 20 and len(info.sources) > 20
    s32, s128 = presets.get("scalesim_32"), presets.get("scalesim_128")
    assert (s32.pe_rows, s32.sram_input_bytes, s32.sram_weight_bytes, s32.sram_output_bytes, s32.word_bytes) == (
        32, 256 * 1024, 256 * 1024, 128 * 1024, 1)
    assert (s128.pe_rows, s128.sram_input_bytes, s128.sram_output_bytes) == (128, 6144 * 1024, 2048 * 1024)
    with pytest.raises(KeyError, match="valid: scalesim_32"):
        presets.get("tpu")


def test_adding_a_preset_is_one_registration():
    hw = presets.register(Hardware(name="test_tiny", pe_rows=4, pe_cols=4), approximates="a tiny test machine",
                          sources="made up for a test")
    try:
        assert presets.get("test_tiny") is hw and "test_tiny" in presets.names()
    finally:
        presets._PRESETS.pop("test_tiny")


# ------------------------------------------------------------------ "is this one Hardware": one check, one message
def _entry_points():
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.precision_study import PrecisionError, precision
    from dfit_nb.sim import cost, replay_batch, select_dataflows, sweep
    from dfit_nb.sim._cost import CostInputError
    from dfit_nb.sim._reconcile import reconcile
    from dfit_nb.sim._replay import ReplayError, replay, warm
    from dfit_nb.sim._thermal import ThermalError, thermal
    from dfit_nb.sim.calibration import CalibrationError, calibrate
    from dfit_nb.sim.families import FamilyError, by_family
    from dfit_nb.sim.kernel_predictor import KernelRowError, kernel_predictor
    from dfit_nb.sim.policy import PolicyError

    t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((8, 16)), jnp.ones((16, 4)))
    ops = {"m": [8], "k": [16], "n": [4]}
    measured = pd.DataFrame({"m": [8, 16, 32, 64], "k": 16, "n": 4, "dtype": "float32", "time_s": 1e-6})
    run = replay(t, presets.get("scalesim_32"))
    # name -> (call taking the hw value, the error class its callers catch, whether it takes a batch)
    return {
        "cost()": (lambda hw: cost(ops, hw), CostInputError, False),
        "sweep()": (lambda hw: sweep(ops, hw, progress=False), CostInputError, False),
        "replay()": (lambda hw: replay(t, hw), ReplayError, False),
        "warm()": (lambda hw: warm(t, hw), ReplayError, False),
        "replay_batch()": (lambda hw: replay_batch(t, hw), ReplayError, True),
        "select_dataflows()": (lambda hw: select_dataflows(t, hw), PolicyError, None),
        "by_family()": (lambda hw: by_family({"mlp": t}, hw), FamilyError, False),
        "precision()": (lambda hw: precision(t, hw=hw), PrecisionError, False),
        "reconcile()": (lambda hw: reconcile(t, hw, None), HardwareError, False),
        "kernel_predictor()": (lambda hw: kernel_predictor(None, hw), KernelRowError, False),
        "calibrate()": (lambda hw: calibrate(measured, hw, ["clock_ghz"]), CalibrationError, False),
        "thermal()": (lambda hw: thermal(run, hw=hw), ThermalError, False),
    }


def test_every_entry_point_refuses_a_non_machine_and_a_wrong_batch_with_one_message():
    one = presets.get("npu_like")
    batch = Hardware.stack([one, one.replace(pe_rows=8)], name="two")
    for where, (call, error, takes_batch) in _entry_points().items():
        with pytest.raises(error) as info:
            call("npu_like")
        text = str(info.value)
        for token in (f"{where}: hw must be", "dfit_nb.sim.Hardware", "dfit_nb.sim.presets.get(name)",
                      "got a str ('npu_like')"):
            assert token in text, (where, token, text)
        if takes_batch is None:
            continue
        with pytest.raises(error) as info:
            call(one if takes_batch else batch)
        text = str(info.value)
        want = ("a 1-D batch of machines", "hw ('npu_like') is one machine") if takes_batch else (
            "one machine (one dfit_nb.sim.Hardware)", "hw ('two') is a batch of machines of shape (2,)")
        for token in (f"{where} takes", *want):
            assert token in text, (where, token, text)


def test_check_hardware_passes_the_machine_through_and_names_other_arguments():
    from dfit_nb.sim.hardware import check_hardware

    hw = presets.get("tpu_v4")
    assert check_hardware(hw, "f()") is hw
    batch = Hardware.stack([hw, hw])
    assert check_hardware(batch, "f()", batch=None) is batch and check_hardware(batch, "f()", batch=True) is batch
    with pytest.raises(HardwareError, match=r"f\(\) takes a 1-D batch .* is a batch of machines of shape \(2, 2\)"):
        check_hardware(Hardware(pe_rows=np.full((2, 2), 8)), "f()", batch=True)
    with pytest.raises(TypeError, match=r"f\(\): base must be one dfit_nb\.sim\.Hardware .* or None, got an int \(3\)"):
        check_hardware(3, "f()", argument="base", error=TypeError, also_valid="or None")
    with pytest.raises(KeyError):
        check_hardware(batch, "f()", error=TypeError, batch_error=KeyError)


def test_the_report_names_a_machine_that_is_neither_a_preset_nor_a_hardware():
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.report import ReportError, analyse

    t = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((8, 16)), jnp.ones((16, 4)))
    with pytest.raises(ReportError, match=r"the report: each machine of hw must be one dfit_nb\.sim\.Hardware "
                                          r".* or a preset's name \(scalesim_32, .*got an int \(3\)"):
        analyse(t, ["npu_like", 3], progress=False)
    with pytest.raises(ReportError, match=r"unknown preset 'npu'"):
        analyse(t, "npu", progress=False)


def test_row_reductions_is_static_validated_kept_and_recorded(tmp_path):
    """How the compiler fuses a reduction over rows is pytree metadata (one compiled program serves both ways),
    refused by name when unknown, kept by replace, stacked only alike, and recorded where it is not the default,
    so a saved result rebuilds its machine."""
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim.hardware import from_provenance

    v4 = presets.get("tpu_v4")
    assert v4.row_reductions == "split" and presets.get("tpu_like").row_reductions == "fused"
    assert Hardware().row_reductions == "fused"
    leaves, tree = jax.tree_util.tree_flatten(v4)
    assert len(leaves) == len(FIELDS) and jax.tree_util.tree_unflatten(tree, leaves) == v4
    assert v4.replace(pe_rows=64).row_reductions == "split"
    assert "row reductions: split" in v4.describe() and "row reductions" not in Hardware().describe()
    with pytest.raises(HardwareError, match=r"row_reductions = 'rows'.*valid: fused, split"):
        Hardware(row_reductions="rows")
    assert Hardware.stack([v4, v4]).row_reductions == "split"
    # machines that fuse differently stack for their numbers (peak, area), not to replay a Trace
    mixed = Hardware.stack([v4, presets.get("tpu_like")])
    assert mixed.row_reductions == "mixed" and mixed.peak_macs_per_cycle.tolist() == [131072, 131072]
    assert mixed.replace(pe_rows=64).row_reductions == "mixed"  # a valid machine batch, changed as any other
    t = dfit_nb.capture(lambda a: jnp.tanh(a) @ a, jnp.ones((8, 8)))
    with pytest.raises(ValueError, match=r"fuse a reduction over rows differently.*hw.row_reductions"):
        dfit_nb.sim.replay_batch(t, mixed)
    run = dfit_nb.replay(t, v4)
    assert run.attrs["row_reductions"] == "split" and from_provenance(run.attrs) == v4
    assert "row_reductions" not in dfit_nb.replay(t, presets.get("tpu_like")).attrs
    loaded = dfit_nb.load_run(run.save(tmp_path / "run.nc"))
    assert from_provenance(loaded.attrs) == v4


def test_entry_points_check_machines_of_jax_arrays_and_rebuilt_machines():
    """The constructor leaves JAX's own values unchecked (gradients, tracers); an entry point that prices a
    machine checks the concrete ones: a machine of jnp.array fields, or one jax.tree_util.tree_map rebuilt
    without the constructor, was priced with a negative bandwidth, gave NaN cycles, or failed deep in the replay."""
    import jax.numpy as jnp

    import dfit_nb
    from dfit_nb.sim import cost

    ops = {"m": [64], "k": [64], "n": [64]}
    with pytest.raises(HardwareError, match=r"dram_bytes_per_cycle .* out of range"):
        cost(ops, Hardware(dram_bytes_per_cycle=jnp.array(-4.0)), "ws")
    with pytest.raises(HardwareError, match=r"tile_rows = 0 is out of range"):
        cost(ops, jax.tree_util.tree_map(lambda v: v * 0, Hardware()), "ws")
    trace = dfit_nb.capture(lambda a, b: a @ b, jnp.ones((8, 8)), jnp.ones((8, 8)))
    with pytest.raises(HardwareError, match=r"clock_ghz .* out of range"):
        dfit_nb.replay(trace, Hardware(clock_ghz=jnp.array(0.0)))
    same = jax.tree_util.tree_map(lambda v: v * 1, Hardware())
    assert float(cost(ops, same, "ws")["cycles"][0]) == float(cost(ops, Hardware(), "ws")["cycles"][0])


def test_an_accumulator_width_is_a_word_size():
    """word_bytes had to be 1, 2, 4 or 8; accumulator_bytes took any whole number to 8, and a 3-byte accumulator
    was priced (4522.7 cycles against 3684 for 4 bytes)."""
    for width in (0, 1, 2, 4, 8):
        assert Hardware(accumulator_bytes=width).accumulator_bytes == width
    with pytest.raises(HardwareError, match=r"accumulator_bytes = 3 is not an accumulator width: it must be 0"):
        Hardware(accumulator_bytes=3)
