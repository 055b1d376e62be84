"""JAX's CPU dispatch as ``dfit_nb.setup()`` sets it, and ``import dfit_nb`` leaves it
(``dfit_nb/_runtime/dispatch.py``).

JAX fixes the CPU client's dispatch when it creates the client, so every case runs in a fresh subprocess. What
is checked is the client's behaviour, not only the option: a synchronous client returns a program's result
already computed (``is_ready()`` right after the call), an asynchronous one returns it while a long matmul still
runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dfit_nb._runtime import dispatch as _dispatch

#: the child: optionally compute before dfit_nb.setup() (or never call it), then time a long matmul's call and
#: report whether its result was ready when the call returned
CHILD = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    if sys.argv[1] == "compute-first":
        jnp.zeros(1).block_until_ready()  # the CPU client exists before dfit_nb is imported
    import dfit_nb
    from dfit_nb._runtime import dispatch as _dispatch
    if sys.argv[1] != "import-only":
        dfit_nb.setup()
    f = jax.jit(lambda a: (a @ a @ a @ a).sum())
    a = jnp.ones((1500, 1500))
    f(a).block_until_ready()  # compiled
    ready = []
    for _ in range(3):
        out = f(a)
        ready.append(out.is_ready())
        out.block_until_ready()
    print(json.dumps({"option_sync": _dispatch.synchronous(), "ready": ready}))
""")


def _child(mode: str, **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != _dispatch.ENV}
    out = subprocess.run([sys.executable, "-c", CHILD, mode], env={**environ, **env}, capture_output=True,
                         text=True, check=True, timeout=300).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh Python process importing JAX
def test_setup_makes_cpu_programs_run_on_the_calling_thread():
    got = _child("setup-first")
    assert got == {"option_sync": True, "ready": [True, True, True]}


@pytest.mark.slow  # a fresh Python process importing JAX
def test_import_alone_leaves_jax_asynchronous():
    got = _child("import-only")
    assert got["option_sync"] is False and not all(got["ready"])


@pytest.mark.slow  # a fresh Python process importing JAX each
@pytest.mark.parametrize("value", ["0", "off"])
def test_the_variable_leaves_jax_asynchronous(value):
    got = _child("setup-first", **{_dispatch.ENV: value})
    assert got["option_sync"] is False and not all(got["ready"])  # a ~0.1 s matmul: some call returned early


@pytest.mark.slow  # a fresh Python process importing JAX
def test_a_client_created_before_setup_is_left_as_it_is():
    got = _child("compute-first")
    assert got["option_sync"] is False and not all(got["ready"])
