"""The core installs without the extras: capture, replay, the Datasets and the reprs work with the UI and cluster
packages absent, and a UI or cluster part says which extra it needs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dfit_nb import _extras

# A fresh interpreter where the extras' packages cannot be imported (every meta-path finder is wrapped to find none
# of them, as if they were not installed), running the core end to end, then asking for each optional part.
_CHILD = textwrap.dedent("""
    import importlib, json, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Absent:
        # wraps each finder: a blocked name is found by none, as if it were not installed (find_spec gives None);
        # everything else (distributions, caches) is the finder's own
        def __init__(self, inner):
            self.inner = inner

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return None
            return self.inner.find_spec(name, path, target)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    sys.meta_path[:] = [Absent(finder) for finder in sys.meta_path]
    import jax.numpy as jnp
    import dfit_nb
    from dfit_nb.sim import presets

    trace = dfit_nb.capture(lambda a, b: jnp.tanh(a @ b), jnp.ones((16, 32)), jnp.ones((32, 8)))
    run = dfit_nb.replay(trace, presets.get("npu_like"))
    sweep = dfit_nb.sim.sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), ["os", "ws"],
                              per_op=False, pe=[(8, 8), (32, 32)])
    front = dfit_nb.sim.pareto_front(sweep, ["total_cycles", "total_energy_j"])
    out = {"cycles": float(run.summary["latency_cycles"]), "events": int(run.summary["n_events"]),
           "html": "<table" in trace._repr_html_() and "<table" in run._repr_html_(),
           "front": int(front.sizes["front"]),
           "loaded": sorted(m for m in BLOCKED if m in sys.modules)}
    for part in ("dfit_nb.views", "dfit_nb.widgets", "dfit_nb.magics", "dfit_nb.report"):
        try:
            importlib.import_module(part)
            out[part] = "imported"
        except ImportError as err:
            out[part] = f"{type(err).__name__}: {err}"
    try:
        dfit_nb.sim.sweep({"m": [64], "k": [64], "n": [64]}, presets.get("scalesim_32"), "os", chunks=1,
                          per_op=False, pe=[(8, 8), (32, 32)])
        out["lazy"] = "ran"
    except ImportError as err:
        out["lazy"] = f"{type(err).__name__}: {err}"
    print(json.dumps(out))
""")


@pytest.mark.slow
def test_the_core_runs_without_the_extras_and_each_optional_part_names_its_extra():
    blocked = [m for extra in _extras.EXTRAS.values() for m in extra]
    p = subprocess.run([sys.executable, "-c", _CHILD, ",".join(blocked)], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    import json

    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["cycles"] > 0 and out["events"] > 0 and out["html"] and out["front"] >= 1
    assert out["loaded"] == []  # nothing of the extras was imported on the way
    for part in ("dfit_nb.views", "dfit_nb.widgets", "dfit_nb.magics", "dfit_nb.report"):
        assert out[part].startswith(f"MissingExtraError: {part}"), out[part]
        assert 'pip install "dfit_nb[ui]"' in out[part] and "not installed" in out[part]
    assert out["lazy"].startswith("MissingExtraError: lazy sweeps") and 'pip install "dfit_nb[cluster]"' in out["lazy"]


def test_a_missing_module_is_named_with_its_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "altair", None)  # what Python records for a module that cannot be imported
    with pytest.raises(ImportError, match=r'dfit_nb.views needs .*"ui" extra \(altair is not installed\): '
                                          r'pip install "dfit_nb\[ui\]"'):
        _extras.require("ui", "dfit_nb.views", ("altair",))
    _extras.require("ui", "dfit_nb.views", ("json",))  # present: nothing raised
