"""``trace.operands``: every op's input and output shapes and dtypes as data (dfit_nb/_operands.py).

The capture writes them, saves keep them typed, traces saved before them are converted from their text on load,
op tables that give shapes as text are read at the edge with an error naming the row, and nothing in the package
parses a shape with a regular expression.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import dfit_nb
from dfit_nb import _files, _operands
from dfit_nb.sim import CostInputError, presets

PKG = Path(dfit_nb.__file__).resolve().parent


def _program(a, w, key):
    y = jax.nn.softmax(a @ w, axis=-1)
    noise = jax.random.uniform(key, y.shape, dtype=jnp.bfloat16)
    return y * noise.astype(jnp.float32) + a[:, :8].sum()


@pytest.fixture(scope="module")
def trace():
    return dfit_nb.capture(_program, jnp.ones((16, 32)), jnp.ones((32, 8)), jax.random.key(0))


def test_the_capture_records_every_operand_as_data(trace):
    ops, operands = trace.ops, trace.operands
    assert operands["shape"].dtype == np.int64 and operands["rank"].dtype == np.int64
    assert set(operands["role"].values) == {"input", "output"}
    dot = int(ops["op"].values[ops["primitive"].values == "dot_general"][0])
    rows = operands.isel(operand=np.flatnonzero(operands["op"].values == dot))
    assert rows["role"].values.tolist() == ["input", "input", "output"]
    assert rows["position"].values.tolist() == [0, 1, 0]
    assert rows["dtype"].values.tolist() == ["float32"] * 3
    assert [s[:r].tolist() for s, r in zip(rows["shape"].values, rows["rank"].values, strict=True)] == \
        [[16, 32], [32, 8], [16, 8]]
    # a PRNG key is an array of a key dtype, in its own position
    keys = operands["dtype"].values.astype(str)
    assert any(k.startswith("key<") for k in keys)
    # every variable says what it is
    assert all("description" in operands[v].attrs for v in operands.data_vars)
    # the display text is the data written out, for every op
    ins, outs = _operands.text_columns(operands, ops["op"].values)
    assert ins.tolist() == ops["in_shapes"].values.tolist() and outs.tolist() == ops["out_shapes"].values.tolist()


def test_reduced_bytes_and_rows_are_read_from_the_data(trace):
    ops, operands = trace.ops, trace.operands
    dot = ops["op"].values[ops["primitive"].values == "dot_general"]
    start, nbytes = _operands.input_table(operands, dot, 4.0)
    assert start.tolist() == [0, 2] and nbytes.tolist() == [16 * 32 * 4, 32 * 8 * 4]
    reductions = ops["op"].values[ops["op_class"].values == "reduction"]
    rows = _operands.reduced_row(operands, reductions)
    assert 8.0 in rows.tolist()  # the softmax reduces rows of 8


@pytest.mark.parametrize("suffix", [".nc", ".zarr"])
def test_operands_survive_a_save_typed(trace, tmp_path, suffix):
    back = dfit_nb.load_trace(trace.save(tmp_path / f"t{suffix}"))
    for name in trace.operands.variables:
        assert back.operands[name].values.tolist() == trace.operands[name].values.tolist(), name
    assert back.operands["shape"].dtype == np.int64


def _save_in_the_old_format(trace, path):
    """``trace`` saved as dfit_nb saved traces before the operands Dataset (format 1.1: no ``operands`` group)."""
    tree = trace.to_datatree()
    old = xr.DataTree.from_dict({"/": tree.to_dataset(), **{f"/{p}": tree[p].to_dataset()
                                                           for p in ("ops", "edges", "regions", "lowering")}})
    path = _files.save_tree(old, path)
    with h5py.File(path, "r+") as f:
        assert "operands" not in f
        f.attrs[_files.FORMAT_ATTR] = "1.1"
    return path


def test_a_trace_saved_before_operands_loads_with_them_from_its_text(trace, tmp_path):
    back = dfit_nb.load_trace(_save_in_the_old_format(trace, tmp_path / "old.nc"))
    for name in trace.operands.variables:
        assert back.operands[name].values.tolist() == trace.operands[name].values.tolist(), name
    hw = presets.get("eyeriss_like")
    assert float(dfit_nb.replay(back, hw).summary["energy_j"]) == float(dfit_nb.replay(trace, hw).summary["energy_j"])


def test_a_malformed_shape_in_an_old_trace_names_its_row(trace):
    ops = trace.ops.copy(deep=True)
    text = ops["in_shapes"].values.astype(object)
    text[2] = "float32[16,"
    ops["in_shapes"] = ("op", text)
    with pytest.raises(_operands.ShapeTextError, match=r"trace.ops column 'in_shapes' row 2: 'float32\[16,'"):
        dfit_nb.Trace(ops, trace.edges, trace.regions, trace.lowering, attrs={}, overhead=trace.overhead)


def _dram_reads(costs: xr.Dataset) -> list[float]:
    return (costs["dram_reads_input"] + costs["dram_reads_weight"]).values.tolist()


def test_an_op_table_gives_shapes_as_text_and_a_malformed_one_names_its_row():
    hw = presets.get("eyeriss_like").replace(word_bytes=4)  # a native float32 word: widths are not cast down
    table = {"m": [16, 16], "k": [32, 32], "n": [8, 8], "dtype": ["float32", "float32"]}
    plain = dfit_nb.sim.cost(table, hw, "ws")
    # bfloat16 operands: half the bytes of the GEMM view's float32 ones
    shaped = dfit_nb.sim.cost({**table, "in_shapes": ["bfloat16[16, 32] bfloat16[32,8]", ""]}, hw, "ws")
    assert _dram_reads(shaped)[0] < _dram_reads(plain)[0]
    assert _dram_reads(shaped)[1] == _dram_reads(plain)[1]  # no shapes: the GEMM view
    for bad in ("float32[16,x] float32[32,8]", "float32[16,32", "[16,32]", "float32[16,32]junk", "float32[²]"):
        with pytest.raises(CostInputError, match=r"ops column 'in_shapes' row 1: .* is not a shape; valid: "):
            dfit_nb.sim.cost({**table, "in_shapes": ["float32[16,32] float32[32,8]", bad]}, hw, "ws")


def _regex_literals() -> list[tuple[str, int, str]]:
    """Every string given to a function of ``re`` in the package: (module, line, pattern)."""
    out = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.append((str(path.relative_to(PKG)), node.lineno, node.args[0].value))
    return out


#: the regular expressions that read other texts with shapes in them, which only exist as text: the command line's
#: ``--args`` spec a user types, and the optimized HLO XLA prints
OTHER_TEXTS = {"_cli_inputs.py", "capture/_hlo_text.py"}


def _splits_a_shape(pattern: str) -> bool:
    """Whether ``pattern`` finds a shape token and captures its dtype or its dims."""
    for shape, parts in (("float32[2,3]", {"float32", "2,3"}), ("bfloat16[8,128]", {"bfloat16", "8,128"})):
        found = re.search(pattern, shape)
        if found and parts.intersection(g for g in found.groups() if g):
            return True
    return False


def test_no_regular_expression_in_the_package_parses_a_shape():
    patterns = _regex_literals()
    assert len(patterns) > 10  # the scan finds the package's regular expressions
    assert {m for m, _, p in patterns if _splits_a_shape(p)} == OTHER_TEXTS
    # a trace's shapes text is read in the documented places only: traces saved before trace.operands and the
    # arguments attribute (capture/trace.py), op tables a user writes (sim/_optable.py)
    readers = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
                     if re.search(r"_operands\.(parse|from_text)\(", p.read_text()))
    assert readers == ["capture/trace.py", "sim/_optable.py"]
