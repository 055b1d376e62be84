"""rfc3987_syntax waits for its first IRI check (dfit_nb._deferred_iri): the same answers, the same module after.

Each check runs in a fresh process: this one imported jsonschema (nbval) before dfit_nb could defer anything. They
load the module from its file (``DEFER``) rather than through ``import dfit_nb`` (JAX: a second or more per process);
the last test checks that ``import dfit_nb`` defers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dfit_nb import _deferred_iri

pytest.importorskip("rfc3987_syntax", reason="the test extras install rfc3987-syntax (pyproject.toml)")

VALUES = ["http://example.com/ü", "https://例え.テスト/パス?q=1#frag", "mailto:a@b.c", "urn:isbn:0451450523",
          "not an iri", "//host/path", "../relative/ref", "http://[::1]:80/", "http://a b", "", "http://%zz"]

#: what ``import dfit_nb`` does about the module, without importing JAX
DEFER = textwrap.dedent(f"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("deferred_iri", {_deferred_iri.__file__!r})
    deferred_iri = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(deferred_iri)
    deferred_iri.defer()
""")

VALIDATE = DEFER + textwrap.dedent("""
    import json, sys
    import jsonschema
    deferred = "rfc3987_syntax.syntax_helpers" not in sys.modules
    checker = jsonschema.Draft7Validator.FORMAT_CHECKER
    answers = {fmt: [checker.conforms(v, fmt) for v in json.loads(sys.argv[1])] for fmt in ("iri", "iri-reference")}
    real = type(sys.modules["rfc3987_syntax"]).__name__ == "module" and "rfc3987_syntax.syntax_helpers" in sys.modules
    print(json.dumps({"deferred": deferred, "answers": answers, "real_after": real}))
""")


def _run(code: str, *args: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_jsonschema_checks_iris_as_the_real_module_does_and_imports_it_at_the_first_check():
    on = json.loads(_run(VALIDATE, json.dumps(VALUES)))
    off = json.loads(_run(VALIDATE, json.dumps(VALUES), DFIT_NB_DEFER_IRI="0"))
    assert on["deferred"] and not off["deferred"]  # imported with jsonschema only where dfit_nb did not defer it
    assert on["answers"] == off["answers"]
    assert on["real_after"] and off["real_after"]
    assert sum(on["answers"]["iri"]) not in (0, len(VALUES))  # the values tell valid from invalid: a real check


def test_every_other_use_of_the_module_gets_the_real_one():
    code = DEFER + textwrap.dedent("""
        import sys
        import rfc3987_syntax as r
        assert type(r).__name__ == "_StandIn" and "rfc3987_syntax.syntax_helpers" not in sys.modules
        assert r.is_valid_syntax_iri("http://a/b") and not r.is_valid_syntax_iri("no iri")  # imports it
        assert type(sys.modules["rfc3987_syntax"]).__name__ == "module"
        import rfc3987_syntax.syntax_helpers as h
        assert h.is_valid_syntax is sys.modules["rfc3987_syntax"].is_valid_syntax
        print("ok")
    """)
    assert _run(code) == "ok"
    star = DEFER + textwrap.dedent("""
        import sys
        namespace = {}
        exec("from rfc3987_syntax import *", namespace)  # through the stand-in: its __all__ imports the module
        assert "is_valid_syntax_ipv6address" in namespace and "make_syntax_validator" in namespace
        assert type(sys.modules["rfc3987_syntax"]).__name__ == "module"
        print("ok")
    """)
    assert _run(star) == "ok"


def test_without_lark_nothing_is_deferred_and_a_failed_import_leaves_the_stand_in_to_fail_again():
    code = textwrap.dedent("""
        import sys
        sys.modules["lark"] = None  # as if lark were not installed
    """) + DEFER + textwrap.dedent("""
        import jsonschema
        assert "rfc3987_syntax" not in sys.modules or sys.modules["rfc3987_syntax"] is None
        assert "iri" not in jsonschema.Draft7Validator.FORMAT_CHECKER.checkers  # as jsonschema does without dfit_nb
        print("ok")
    """)
    assert _run(code) == "ok"
    code = DEFER + textwrap.dedent("""
        import sys
        import jsonschema
        stand_in = sys.modules["rfc3987_syntax"]
        sys.modules["lark"] = None  # lark breaks after the stand-in went in: the check raises, every time
        for _ in range(2):
            try:
                jsonschema.Draft7Validator.FORMAT_CHECKER.conforms("http://a/b", "iri")
            except ImportError:
                pass
            else:
                raise AssertionError("no ImportError")
            assert sys.modules["rfc3987_syntax"] is stand_in
        print("ok")
    """)
    assert _run(code) == "ok"


def test_nothing_is_deferred_when_switched_off_or_already_imported():
    assert "rfc3987_syntax" in sys.modules  # this process: jsonschema imported it before dfit_nb
    assert not _deferred_iri.defer()
    code = "import sys, dfit_nb; print(type(sys.modules.get('rfc3987_syntax')).__name__)"
    assert _run(code, DFIT_NB_DEFER_IRI="off") == "NoneType"
    assert _run(code) == "_StandIn"
