"""``import dfit_nb`` changes nothing global; ``dfit_nb.setup()`` makes the process-wide settings and says which.

The import is checked in a fresh process (this one has run ``setup()``, see the repository's conftest.py): every
``jax.config`` value, ``sys.modules``, the environment (``XLA_FLAGS`` included), JAX's compilation cache and backends,
and the cache directories on disk are as they were before it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dfit_nb._runtime import compile_cache as _compile_cache

#: the child: snapshot, import dfit_nb, compare; then setup() twice; print the findings as JSON
CHILD = textwrap.dedent("""
    import json, os, sys, types
    import jax
    from jax._src import compilation_cache, xla_bridge

    config, modules, environ = dict(jax.config.values), dict(sys.modules), dict(os.environ)
    flags = os.environ.get("XLA_FLAGS")
    import dfit_nb

    package = os.path.dirname(dfit_nb.__file__)
    after = dict(jax.config.values)
    missing = object()
    new = {name: m for name, m in sys.modules.items() if name not in modules}

    def from_dfit_nb(module):
        # a stand-in: an object of dfit_nb's making, or a module whose code lies in dfit_nb, under another name
        origin = getattr(getattr(module, "__spec__", None), "origin", None) or getattr(module, "__file__", None) or ""
        return type(module).__module__.startswith("dfit_nb") or os.path.abspath(origin).startswith(package)

    found = {
        "config_changed": sorted(k for k in {*config, *after} if config.get(k, missing) is not after.get(k, missing)
                                 and config.get(k, missing) != after.get(k, missing)),
        "replaced": sorted(name for name in modules if sys.modules.get(name) is not modules[name]),
        "stand_ins": sorted(name for name, m in new.items() if not name.startswith("dfit_nb") and m is not None
                            and from_dfit_nb(m)),
        "not_modules": sorted(name for name, m in new.items() if not isinstance(m, types.ModuleType)),
        "rfc3987_syntax": type(sys.modules.get("rfc3987_syntax")).__module__,
        "xla_flags_same": os.environ.get("XLA_FLAGS") == flags,
        "environ_same": dict(os.environ) == environ,
        "jax_cache_opened": compilation_cache._cache is not None,
        "backends": xla_bridge.backends_are_initialized(),
        "cache_dirs": sorted(p for p in (os.environ["DFIT_NB_COMPILATION_CACHE"], os.environ["XDG_CACHE_HOME"],
                                         os.environ["HOME"]) if os.path.exists(p)),
    }
    report = dfit_nb.setup()
    again = dfit_nb.setup()
    found.update(
        changed=report.changed, unchanged=report.unchanged, directory=report.compilation_cache,
        again_changed=again.changed, again_unchanged=sorted(again.unchanged),
        cache_type=type(compilation_cache._cache).__name__,
        stand_in_after=type(sys.modules.get("rfc3987_syntax")).__name__,
        async_dispatch=jax.config.values["jax_cpu_enable_async_dispatch"],
        cache_dir=jax.config.jax_compilation_cache_dir,
    )
    print(json.dumps(found))
""")


def _child(tmp_path: Path, code: str = CHILD, **env: str) -> dict:
    """Run ``code`` with no dfit_nb or JAX variables but ``env``, HOME and XDG_CACHE_HOME inside ``tmp_path``."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "DFIT_NB_"))}
    e.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "xdg"),
             DFIT_NB_COMPILATION_CACHE=str(tmp_path / "cache"), XLA_FLAGS="--xla_force_host_platform_device_count=1")
    e.update(env)
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _deferrable() -> bool:
    return importlib.util.find_spec("rfc3987_syntax") is not None and importlib.util.find_spec("lark") is not None


@pytest.mark.slow  # a fresh Python process importing JAX
def test_import_changes_nothing_global_and_setup_says_what_it_changes(tmp_path):
    got = _child(tmp_path)
    assert got["config_changed"] == [], got["config_changed"]
    assert got["replaced"] == [] and got["stand_ins"] == [] and got["not_modules"] == []
    assert got["rfc3987_syntax"] == "builtins"  # not imported at all (type(None)), least of all as dfit_nb's stand-in
    assert got["xla_flags_same"] and got["environ_same"]
    assert not got["jax_cache_opened"] and not got["backends"] and got["cache_dirs"] == []

    cache = str(tmp_path / "cache")
    expected = {"atomic cache writes": True, "jax_compilation_cache_dir": cache,
                "jax_persistent_cache_min_compile_time_secs": _compile_cache.MIN_COMPILE_TIME_S,
                "jax_persistent_cache_min_entry_size_bytes": -1, "jax_cpu_enable_async_dispatch": False}
    if _deferrable():
        expected["sys.modules['rfc3987_syntax']"] = got["changed"].get("sys.modules['rfc3987_syntax']")
        assert got["stand_in_after"] == "StandIn"
    assert got["changed"] == expected and got["unchanged"] == ({} if _deferrable() else got["unchanged"])
    assert (got["directory"], got["cache_dir"], got["async_dispatch"]) == (cache, cache, False)
    assert got["cache_type"] == "AtomicFileCache"
    # idempotent: the second call changes nothing and says each part is done
    assert got["again_changed"] == {}
    assert got["again_unchanged"] == ["jax_compilation_cache_dir", "jax_cpu_enable_async_dispatch",
                                      "sys.modules['rfc3987_syntax']"]


#: the child: the user configures JAX's cache, computes and imports the IRI parser before calling setup()
LATE = textwrap.dedent("""
    import json, sys
    import jax, jax.numpy as jnp
    jnp.zeros(1).block_until_ready()  # the CPU client exists: its dispatch is fixed
    try:
        import rfc3987_syntax
    except ImportError:
        pass
    import dfit_nb
    report = dfit_nb.setup()
    print(json.dumps({"changed": report.changed, "unchanged": report.unchanged, "directory": report.compilation_cache,
                      "async_dispatch": jax.config.values["jax_cpu_enable_async_dispatch"]}))
""")


@pytest.mark.slow  # a fresh Python process importing JAX
def test_setup_leaves_what_the_user_chose_and_says_what_came_too_late(tmp_path):
    theirs = str(tmp_path / "theirs")
    got = _child(tmp_path, LATE, JAX_COMPILATION_CACHE_DIR=theirs)
    assert got["changed"] == {} and got["directory"] == theirs and got["async_dispatch"] is True
    assert "configured in JAX" in got["unchanged"]["jax_compilation_cache_dir"]
    assert got["unchanged"]["jax_cpu_enable_async_dispatch"].startswith("too late")
    assert got["unchanged"]["sys.modules['rfc3987_syntax']"].startswith(
        "too late" if _deferrable() else "not installed")
    assert not (tmp_path / "cache").exists()
    # each variable switches its part off
    got = _child(tmp_path, CHILD, DFIT_NB_COMPILATION_CACHE="0", DFIT_NB_SYNC_CPU_DISPATCH="0", DFIT_NB_DEFER_IRI="off")
    assert got["changed"] == {} and got["directory"] is None and got["async_dispatch"] is True
    assert got["unchanged"] == {"jax_compilation_cache_dir": "switched off by DFIT_NB_COMPILATION_CACHE",
                                "jax_cpu_enable_async_dispatch": "DFIT_NB_SYNC_CPU_DISPATCH=0",
                                "sys.modules['rfc3987_syntax']": "DFIT_NB_DEFER_IRI=off"}


def test_a_cache_entry_appears_whole_or_not_at_all(tmp_path, monkeypatch):
    """JAX 0.10 writes an entry in place (``Path.write_bytes`` on its final name), so another process could read
    it half-written; the cache ``setup()`` gives JAX writes a hidden temporary file and renames it into place."""
    cls = _compile_cache.atomic_file_cache()
    assert cls is not None
    cache = cls(str(tmp_path), max_size=-1)
    renames = []
    real_replace = os.replace

    def replace(src, dst):
        renames.append((Path(src), Path(dst), os.path.exists(dst), Path(src).read_bytes()))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    value = os.urandom(1 << 20)
    cache.put("key", value)
    (src, dst, visible, written), = renames
    assert dst == tmp_path / "key-cache" and not visible and written == value  # whole before its name appears
    assert src.parent == tmp_path and src.name.startswith(".")  # never taken for an entry (JAX globs *-cache)
    assert cache.get("key") == value and sorted(os.listdir(tmp_path)) == ["key-cache"]
    cache.put("key", b"other")  # an entry is never rewritten, as in JAX
    assert cache.get("key") == value and len(renames) == 1

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        cache.put("other", value)
    assert sorted(os.listdir(tmp_path)) == ["key-cache"]  # no entry, no temporary left behind
