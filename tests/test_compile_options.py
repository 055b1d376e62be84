"""How dfit_nb's model programs are compiled (dfit_nb/_runtime/compile_options.py): with XLA's CPU loop emitters, the
same numbers as XLA's defaults, and XLA's defaults wherever the option is switched off or unknown."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import dfit_nb
from dfit_nb._runtime import compile_options as _compile_options
from dfit_nb._runtime import exported as _exported
from dfit_nb.sim import _batch, _cost, _replay, _thermal, _viterbi, cost, grid, presets, select_dataflows

#: the programs whose compile is what a first call waits for (module, attribute): compiled with the options; the
#: batched programs' compiles for calls of little work (by_work) among them
PROGRAMS = ((_cost, "_evaluate"), (_replay, "program"), (_viterbi, "_select"), (_batch, "_batch_program_fast_compile"),
            (_batch, "_styles_program_fast_compile"), (grid, "_evaluate_batch_fast_compile"))
#: the programs whose run time matters more (vmapped over many machines, or a latency figure): XLA's defaults
DEFAULTS = ((_cost, "_evaluate_small"), (_batch, "_styles_program"), (_batch, "_batch_program"),
            (grid, "_evaluate_batch"), (_thermal, "_simulate"))
#: a batched program's two compiles: (module, compiled with XLA's defaults, compiled with the options)
TWINS = ((_batch, "_batch_program", "_batch_program_fast_compile"),
         (_batch, "_styles_program", "_styles_program_fast_compile"),
         (grid, "_evaluate_batch", "_evaluate_batch_fast_compile"))


@pytest.fixture
def fresh_options():
    """``options()`` decided again in this test (it is cached per process), and again after it."""
    _compile_options.options.cache_clear()
    yield
    _compile_options.options.cache_clear()


def test_the_compile_bound_programs_get_the_options_and_the_run_bound_ones_do_not():
    assert _compile_options.options() == _compile_options.OPTIONS  # the CPU backend of the test run knows them
    for module, name in PROGRAMS:
        program = getattr(module, name)
        assert isinstance(program, _compile_options._Program), f"{module.__name__}.{name} is a plain jax.jit"
        assert program.compiler_options == _compile_options.OPTIONS
    for module, name in DEFAULTS:
        assert not isinstance(getattr(module, name), _compile_options._Program), f"{module.__name__}.{name}"


def test_cost_runs_the_default_program_up_to_cost_ops_and_the_loop_emitters_past_it(monkeypatch):
    calls = []
    real = _exported.call_signed
    monkeypatch.setattr(_exported, "call_signed", lambda fn, *a, **k: calls.append(fn) or real(fn, *a, **k))
    hw = presets.get("npu_like")
    for n in (1, _cost.COST_OPS, _cost.COST_OPS + 1):
        cost({"m": [64] * n, "k": [32] * n, "n": [16] * n}, hw)
    assert calls == [_cost._evaluate_small, _cost._evaluate_small, _cost._evaluate]


def test_an_op_costs_the_same_in_a_small_table_and_in_a_large_one():
    """Across the split, the two compiles of one function agree to rounding, and on every discrete choice."""
    hw = presets.get("tpu_like")
    rows = {"m": [64, 128, 200], "k": [64, 512, 96], "n": [256, 128, 7]}
    small = cost(rows, hw, ["ws", "os", "is"])
    large = cost({k: v + [32] * _cost.COST_OPS for k, v in rows.items()}, hw, ["ws", "os", "is"]).isel(op=slice(0, 3))
    for name in ("layout", "gy", "gx", "tiles_used"):
        np.testing.assert_array_equal(small[name].values, large[name].values, err_msg=name)
    per_op = [v for v in small.data_vars if "op" in small[v].dims]  # the totals sum over different tables
    xr.testing.assert_allclose(small[per_op], large[per_op], rtol=1e-13, atol=0)


def _batch_calls(trace, hw):
    """A sweep, a replay_batch and a batch selection, each of little work (a few machines of a small table)."""
    from dfit_nb.sim import Hardware, replay_batch, sweep

    machines = Hardware.stack([hw.replace(dram_bytes_per_cycle=b) for b in (16.0, 64.0)])
    return {"sweep": sweep(trace, hw, ["ws", "os"], progress=False, dram_bw=[8.0, 32.0, 128.0]),
            "replay_batch": replay_batch(trace, machines),
            "select": select_dataflows(trace, machines, "latency")}


def _programs_called(monkeypatch):
    """The functions every call of ``_exported.call`` runs, in order (a spy)."""
    calls = []
    real = _exported.call
    monkeypatch.setattr(_exported, "call", lambda fn, *a, **k: calls.append(fn) or real(fn, *a, **k))
    return calls


def test_a_batch_of_little_work_runs_the_fast_compile(monkeypatch, static_traces):
    for module, default, fast in TWINS:
        assert getattr(module, fast).__wrapped__ is getattr(module, default).__wrapped__  # one function
    calls = _programs_called(monkeypatch)
    _batch_calls(static_traces["mlp"], presets.get("npu_like"))
    twins = {getattr(m, d) for m, d, _ in TWINS} | {getattr(m, f) for m, _, f in TWINS}
    assert [c for c in calls if c in twins] == [grid._evaluate_batch_fast_compile, _batch._batch_program_fast_compile,
                                                _batch._styles_program_fast_compile]


@pytest.mark.slow  # compiles the three batched programs with XLA's defaults too
def test_a_batch_past_the_work_threshold_runs_xla_defaults_and_the_same_numbers(monkeypatch, static_traces):
    trace, hw = static_traces["mlp"], presets.get("npu_like")
    fast = _batch_calls(trace, hw)
    monkeypatch.setattr(_compile_options, "COMPILE_BOUND_WORK", 0)  # every call past it
    calls = _programs_called(monkeypatch)
    defaults = _batch_calls(trace, hw)
    assert [c for c in calls if any(c is getattr(m, f) for m, _, f in TWINS)] == []
    assert {c for c in calls} >= {grid._evaluate_batch, _batch._batch_program, _batch._styles_program}
    for key, value in fast.items():
        for ours, theirs in zip(_datasets(value), _datasets(defaults[key]), strict=True):
            xr.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=0)


def test_the_jitted_program_and_the_exported_one_get_the_options(monkeypatch):
    assert _compile_options.options() == _compile_options.OPTIONS  # decided (its probe compiled) before the spy
    seen = []
    real_jit = jax.jit

    def spy(fun, **kwargs):
        seen.append(kwargs.get("compiler_options"))
        return real_jit(fun, **kwargs)

    monkeypatch.setattr(jax, "jit", spy)
    square = _compile_options.jit(lambda x: x * x)
    assert float(square(jnp.float32(3.0))) == 9.0
    exported = jax.export.export(square.jitted)(jnp.float32(0.0))
    assert float(_exported._compiled(exported, square)(jnp.float32(4.0))) == 16.0
    plain = real_jit(lambda x: x * x)  # a function that is not a model program: XLA's defaults
    assert float(_exported._compiled(jax.export.export(plain)(jnp.float32(0.0)), plain)(jnp.float32(2.0))) == 4.0
    assert seen == [_compile_options.OPTIONS, _compile_options.OPTIONS, None]


def test_a_program_reaches_everything_of_its_jit():
    @functools.partial(_compile_options.jit, static_argnames="power")
    def power(x, power):
        return x ** power

    assert power.__wrapped__.__name__ == "power" and power.__qualname__.endswith("power")
    assert float(power(jnp.float32(2.0), power=3)) == 8.0
    assert power._cache_size() == 1
    assert power.lower(jnp.float32(2.0), power=3).compile()(jnp.float32(2.0)) == 8.0
    assert "model program" in repr(power)


@pytest.mark.parametrize("value", ["0", "off", "false", "no"])
def test_the_variable_leaves_xla_defaults(monkeypatch, fresh_options, value):
    monkeypatch.setenv(_compile_options.ENV, value)
    assert _compile_options.options() is None
    square = _compile_options.jit(lambda x: x * x)
    assert square.compiler_options is None and float(square(jnp.float32(3.0))) == 9.0


def test_an_option_xla_does_not_know_leaves_its_defaults(monkeypatch, fresh_options):
    monkeypatch.delenv(_compile_options.ENV, raising=False)
    monkeypatch.setattr(_compile_options, "OPTIONS", {"xla_cpu_no_such_option_here": False})
    with pytest.raises(Exception, match="xla_cpu_no_such_option_here"):  # what a program would meet without the probe
        jax.jit(lambda x: x + 2, compiler_options=_compile_options.OPTIONS)(jnp.float32(1.0))
    assert _compile_options.options() is None
    assert float(_compile_options.jit(lambda x: x + 2)(jnp.float32(1.0))) == 3.0


def _datasets(value):
    """The Datasets (or DataTree) a result holds, to compare."""
    if isinstance(value, xr.Dataset):
        return [value]
    if isinstance(value, dfit_nb.Run):
        return [value.to_datatree()]
    return [value.choices, xr.Dataset({"per_op": ("op", np.asarray(value.per_op))})]  # a Policy


@pytest.mark.slow  # compiles every model program a second time, with XLA's defaults
def test_the_options_change_no_number(monkeypatch, static_traces):
    trace = static_traces["encoder"]

    def everything():
        out = {}
        for name in ("tpu_like", "sambanova_like"):  # one time-multiplexed 8 x 8 bucket, one spatial 16 x 32
            hw = presets.get(name)
            out[f"replay {name}"] = dfit_nb.replay(trace, hw)
            out[f"cost {name}"] = cost(trace, hw, ["ws", "os", "is"])
            out[f"select {name}"] = select_dataflows(trace, hw, "energy")
        return out

    with_options = everything()
    for module, name in PROGRAMS:  # the same programs, plainly jitted: XLA's default emitters
        program = getattr(module, name)
        monkeypatch.setattr(module, name, jax.jit(program.__wrapped__, **program._jit_kwargs))
    defaults = everything()
    for key, value in with_options.items():
        for ours, theirs in zip(_datasets(value), _datasets(defaults[key]), strict=True):
            # equal to the last bit or two: the two emitters may round a division or a fused multiply-add
            # differently (one unit in the last place of the selection's switch energy, today)
            xr.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=0)
