"""replay_batch with the machine axis sharded over devices: the same results as one device.

The check runs in a subprocess because the two host devices must be requested (``XLA_FLAGS``) before JAX
initialises its backend, which the rest of the test session has already done.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import dfit_nb
    from dfit_nb.sim import Hardware, presets, replay_batch

    assert len(jax.devices()) == 2, jax.devices()
    t = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((64, 128)), jnp.ones((128, 32)))
    base = presets.get("npu_like")
    # two grid shapes (per-machine tile tables); 6 machines, and 5 (odd: padded to the device count)
    hw = Hardware.stack([base, base.replace(pe_rows=8, pe_cols=8), base.replace(tile_rows=2, tile_cols=2),
                         base.replace(dram_bytes_per_cycle=16.0), base.replace(noc_link_bytes_per_cycle=4.0),
                         base.replace(sram_weight_bytes=8192.0)])
    plain = replay_batch(t, hw)
    mesh = Mesh(np.array(jax.devices()), ("machines",))
    by_mesh = replay_batch(t, hw, mesh=mesh)
    with jax.enable_x64(True):  # float64 leaves stay exact
        sharded_hw = jax.device_put(hw, NamedSharding(mesh, PartitionSpec("machines")))
    by_input = replay_batch(t, sharded_hw)
    # a sharded argument runs the plain program: an exported one is for one device
    from dfit_nb._runtime import exported as _exported
    assert _exported._on_several_devices(sharded_hw.clock_ghz)
    assert not _exported._on_several_devices(jnp.ones(2)) and not _exported._on_several_devices(np.ones(2))
    odd = replay_batch(t, jax.tree.map(lambda x: x[:5], hw), mesh=mesh)
    for ds, n in ((by_mesh, 6), (by_input, 6), (odd, 5)):
        assert ds.sizes["machine"] == n
        for v in plain.data_vars:
            np.testing.assert_allclose(ds[v].values, plain[v].values[:n], rtol=1e-12, err_msg=v)
        for c in plain.coords:
            np.testing.assert_array_equal(ds[c].values, plain[c].values[:n], err_msg=c)
    # the compiled program really ran on both devices: its output is sharded like its input
    import importlib
    replay_mod = importlib.import_module("dfit_nb.sim._batch")
    seen = []
    original = replay_mod.batch_program  # which compile of the batch program a call runs
    def spying(machines, ops):
        program = original(machines, ops)
        def spy(*args, **kwargs):
            out = program(*args, **kwargs)
            seen.append(len(out["latency_cycles"].sharding.device_set))
            return out
        return spy
    replay_mod.batch_program = spying
    replay_batch(t, hw, mesh=mesh)
    replay_batch(t, hw)
    assert seen == [2, 1], seen
    print("OK")
''')


@pytest.mark.slow  # a fresh process with two host devices, capturing and replaying end to end
def test_replay_batch_sharded_over_two_host_devices_equals_one_device():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr
