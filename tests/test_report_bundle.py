"""The report's inline Vega bundle is built once per vl-convert version and kept on disk."""

from __future__ import annotations

import pytest
import vl_convert as vlc

from dfit_nb import _report_charts


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _report_charts.bundle.cache_clear()
    yield tmp_path
    _report_charts.bundle.cache_clear()


@pytest.mark.slow
def test_the_bundle_is_kept_on_disk_and_rebuilt_when_it_cannot_be(cache_home, monkeypatch):
    built = _report_charts.bundle()  # real vl-convert: builds and stores it
    stored = list((cache_home / "dfit_nb" / "vega").glob("bundle-*.js"))
    assert len(stored) == 1 and stored[0].read_text(encoding="utf-8") == built
    assert "vega" in built.lower() and "</script" not in built  # safe inside a <script> element
    assert not list(stored[0].parent.glob(".*.tmp"))

    def no_build(**kwargs):
        raise AssertionError("the stored bundle should have been read")

    _report_charts.bundle.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(vlc, "javascript_bundle", no_build)
        assert _report_charts.bundle() == built  # read back, not rebuilt

    # a cache that cannot be written (a file where the folder should be): built, returned, nothing stored
    stored[0].unlink()
    stored[0].parent.rmdir()
    stored[0].parent.write_text("not a folder")
    _report_charts.bundle.cache_clear()
    assert _report_charts.bundle() == built
    assert stored[0].parent.is_file()
