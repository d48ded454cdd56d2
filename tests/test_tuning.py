"""numpy's huge-page advice, as gpuwarden sets it at start (gpuwarden/tuning.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from numpy._core import multiarray

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.tuning import apply_huge_pages, defrag_mode, want_huge_pages

#: /sys/kernel/mm/transparent_hugepage/defrag as kernels print it, the mode in brackets
MADVISE = "always defer defer+madvise [madvise] never\n"
NEVER = "always defer defer+madvise madvise [never]\n"


@pytest.fixture(autouse=True)
def numpy_advice(monkeypatch):
    """Each test starts from numpy's advice on and no NUMPY_MADVISE_HUGEPAGE, and leaves the
    process as it found it."""
    before = multiarray._get_madvise_hugepage()
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    multiarray._set_madvise_hugepage(True)
    yield
    multiarray._set_madvise_hugepage(before)


def defrag(tmp_path, text: str):
    path = tmp_path / "defrag"
    path.write_text(text)
    return path


def test_the_kernels_mode_is_the_bracketed_word(tmp_path):
    assert defrag_mode(defrag(tmp_path, MADVISE)) == "madvise"
    assert defrag_mode(defrag(tmp_path, NEVER)) == "never"
    assert defrag_mode(tmp_path / "absent") is None


@pytest.mark.parametrize(
    ("setting", "mode", "want"),
    [("auto", "madvise", False), ("auto", "defer+madvise", False), ("auto", "never", None),
     ("auto", "defer", None), ("auto", None, None), ("", "madvise", False),
     ("off", "never", False), ("on", "madvise", True), ("OFF", None, False)],
)  # fmt: skip
def test_auto_turns_the_advice_off_only_where_the_kernel_stalls_on_it(setting, mode, want):
    assert want_huge_pages(setting, mode) is want


def test_a_bad_value_names_the_setting():
    with pytest.raises(ConfigError, match="numpy_huge_pages must be one of auto, on, off"):
        want_huge_pages("sometimes", "madvise")


def test_applied_to_numpy_unless_its_own_variable_is_set(tmp_path, monkeypatch):
    path = defrag(tmp_path, MADVISE)
    assert apply_huge_pages("auto", defrag_path=path) is False
    assert multiarray._get_madvise_hugepage() is False
    assert apply_huge_pages("on", defrag_path=path) is True
    assert multiarray._get_madvise_hugepage() is True
    assert apply_huge_pages("auto", defrag_path=defrag(tmp_path, NEVER)) is None
    assert multiarray._get_madvise_hugepage() is True  # left as numpy had it
    monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", "1")
    assert apply_huge_pages("off", defrag_path=path) is None
    assert multiarray._get_madvise_hugepage() is True


def test_the_cli_applies_the_setting_and_refuses_a_bad_one(monkeypatch):
    monkeypatch.setenv("GPUWARDEN_NUMPY_HUGE_PAGES", "off")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code == 0, result.output
    assert multiarray._get_madvise_hugepage() is False
    monkeypatch.setenv("GPUWARDEN_NUMPY_HUGE_PAGES", "always")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0 and "numpy_huge_pages must be one of" in result.output
