"""rfc3987_syntax waits for its first IRI check (dfit_nb._runtime.deferred_iri): the same answers, the same module
after.

Each check runs in a fresh process: in this one the deferral was made by the test run's first plugin
(``tests/early_plugin.py``), before nbval imported jsonschema, and the last test checks that. Four
processes in all (each pays a second or more: Python, jsonschema, and the real module where it is imported); past the
first they load the module from its file (``DEFER``) rather than through ``import dfit_nb`` (JAX), and one puts the
stand-in back (``AGAIN``) to check a second use in the same process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dfit_nb._runtime import deferred_iri as _deferred_iri

pytest.importorskip("rfc3987_syntax", reason="the test extras install rfc3987-syntax (pyproject.toml)")

VALUES = ["http://example.com/ü", "https://例え.テスト/パス?q=1#frag", "mailto:a@b.c", "urn:isbn:0451450523",
          "not an iri", "//host/path", "../relative/ref", "http://[::1]:80/", "http://a b", "", "http://%zz"]

#: what ``dfit_nb.setup()`` does about the module, without importing JAX
DEFER = textwrap.dedent(f"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("deferred_iri", {_deferred_iri.__file__!r})
    deferred_iri = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deferred_iri)
    assert deferred_iri.defer()
""")

#: the stand-in put back, as in a fresh process (the real package forgotten; its parsers, built, stay in memory)
AGAIN = textwrap.dedent("""
    del sys.modules["rfc3987_syntax"]
    assert deferred_iri.defer()
""")

VALIDATE = textwrap.dedent("""
    import json, sys
    import dfit_nb
    dfit_nb.setup()
    import jsonschema
    deferred = type(sys.modules.get("rfc3987_syntax")).__name__ == "StandIn"
    checker = jsonschema.Draft7Validator.FORMAT_CHECKER
    values = json.loads(sys.argv[1])
    answers = {fmt: [checker.conforms(v, fmt) for v in values] for fmt in ("iri", "iri-reference")}
    real = sys.modules["rfc3987_syntax"]  # the first check imported it
    imported = type(real).__name__ == "module" and "rfc3987_syntax.syntax_helpers" in sys.modules
    # what jsonschema's checks give without dfit_nb: the real function, called as they call it
    reference = {fmt: [real.is_valid_syntax(fmt.replace("-", "_"), v) for v in values] for fmt in answers}
    print(json.dumps({"deferred": deferred, "answers": answers, "imported": imported, "reference": reference}))
""")


def _run(code: str, *args: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_setup_defers_it_and_jsonschema_checks_iris_as_the_real_module_does():
    out = json.loads(_run(VALIDATE, json.dumps(VALUES)))
    assert out["deferred"] and out["imported"]  # a stand-in after setup(), the module after the first check
    assert out["answers"] == out["reference"]
    assert sum(out["answers"]["iri"]) not in (0, len(VALUES))  # the values tell valid from invalid: a real check


def test_every_other_use_of_the_module_gets_the_real_one():
    code = DEFER + textwrap.dedent("""
        import sys
        import rfc3987_syntax as r
        assert type(r).__name__ == "StandIn" and "rfc3987_syntax.syntax_helpers" not in sys.modules
        assert r.is_valid_syntax_iri("http://a/b") and not r.is_valid_syntax_iri("no iri")  # imports it
        assert type(sys.modules["rfc3987_syntax"]).__name__ == "module"
        import rfc3987_syntax.syntax_helpers as h
        assert h.is_valid_syntax is sys.modules["rfc3987_syntax"].is_valid_syntax
    """) + AGAIN + textwrap.dedent("""
        namespace = {}
        exec("from rfc3987_syntax import *", namespace)  # through the stand-in: its __all__ imports the module
        assert "is_valid_syntax_ipv6address" in namespace and "make_syntax_validator" in namespace
        assert type(sys.modules["rfc3987_syntax"]).__name__ == "module"
        print("ok")
    """)
    assert _run(code) == "ok"


def test_switched_off_or_without_lark_nothing_is_deferred_and_a_failed_import_leaves_the_stand_in_to_fail_again():
    code = textwrap.dedent("""
        import os, sys
        os.environ["DFIT_NB_DEFER_IRI"] = "off"
    """) + DEFER.replace("assert deferred_iri.defer()", "assert not deferred_iri.defer()") + textwrap.dedent("""
        assert "rfc3987_syntax" not in sys.modules  # switched off: nothing put there
        del os.environ["DFIT_NB_DEFER_IRI"]
        sys.modules["lark"] = None  # as if lark were not installed
        assert not deferred_iri.defer()
        import jsonschema
        assert sys.modules.get("rfc3987_syntax") is None
        assert "iri" not in jsonschema.Draft7Validator.FORMAT_CHECKER.checkers  # as jsonschema does without dfit_nb
        del sys.modules["lark"]
        assert deferred_iri.defer()  # lark found again
        stand_in = sys.modules["rfc3987_syntax"]
        sys.modules["lark"] = None  # lark breaks after the stand-in went in: the check raises, every time
        for _ in range(2):
            try:
                stand_in.is_valid_syntax("iri", "http://a/b")  # what jsonschema's "iri" check calls
            except ImportError:
                pass
            else:
                raise AssertionError("no ImportError")
            assert sys.modules["rfc3987_syntax"] is stand_in
        print("ok")
    """)
    assert _run(code) == "ok"


def test_nothing_is_deferred_where_the_module_is_imported_already():
    assert "rfc3987_syntax" in sys.modules  # this process: the stand-in the test run's first plugin put there
    assert not _deferred_iri.defer()


@pytest.mark.slow
def test_a_test_run_defers_it_before_nbval_imports_jsonschema_and_dfit_nb_keeps_that_module():
    code = textwrap.dedent("""
        import json, sys
        import pytest
        assert pytest.main(["--collect-only", "-q", "-p", "no:xdist", "notebooks/01_quick_start.ipynb"]) == 0
        collected = {"nbformat": "nbformat" in sys.modules, "jsonschema": "jsonschema" in sys.modules,
                     "stand_in": type(sys.modules.get("rfc3987_syntax")).__name__,
                     "parsers": "rfc3987_syntax.syntax_helpers" in sys.modules}
        loaded = sys.modules["dfit_nb._runtime.deferred_iri"]
        import dfit_nb
        print(json.dumps({**collected, "one_module": dfit_nb._setup._deferred_iri is loaded}))  # what setup() uses
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "nbformat": True, "jsonschema": True, "stand_in": "StandIn", "parsers": False, "one_module": True}
