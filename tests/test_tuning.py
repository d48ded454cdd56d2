"""numpy's huge-page advice and pyarrow's memory pool, as gpuwarden sets them at start
(gpuwarden/tuning.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner
from numpy._core import multiarray

from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.tuning import (
    apply_arrow_pool,
    apply_huge_pages,
    defrag_mode,
    want_arrow_pool,
    want_huge_pages,
)

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


def test_the_cli_applies_the_setting_and_refuses_a_bad_one(monkeypatch, arrow_pool):
    monkeypatch.setenv("GPUWARDEN_NUMPY_HUGE_PAGES", "off")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code == 0, result.output
    assert multiarray._get_madvise_hugepage() is False
    monkeypatch.setenv("GPUWARDEN_NUMPY_HUGE_PAGES", "always")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0 and "numpy_huge_pages must be one of" in result.output


# -- pyarrow's memory pool ------------------------------------------------------------------


@pytest.fixture
def arrow_pool(monkeypatch):
    """pyarrow's default pool and ARROW_DEFAULT_MEMORY_POOL restored after the test."""
    import pyarrow as pa

    before = pa.default_memory_pool()
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    yield pa
    pa.set_memory_pool(before)


@pytest.mark.parametrize(
    ("setting", "mode", "want"),
    [("auto", "madvise", "system"), ("auto", "defer+madvise", "system"), ("auto", "never", None),
     ("auto", None, None), ("", "madvise", "system"), ("mimalloc", "madvise", "mimalloc"),
     ("System", "never", "system")],
)  # fmt: skip
def test_auto_takes_the_c_librarys_allocator_only_where_the_kernel_stalls(setting, mode, want):
    assert want_arrow_pool(setting, mode) == want


def test_a_bad_pool_names_the_setting():
    with pytest.raises(ConfigError, match="arrow_memory_pool must be one of auto, system"):
        want_arrow_pool("tcmalloc", "madvise")


def test_the_pool_is_swapped_in_once_pyarrow_is_loaded(tmp_path, arrow_pool, monkeypatch):
    pa = arrow_pool
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    assert apply_arrow_pool("auto", defrag_path=defrag(tmp_path, NEVER)) is None
    assert pa.default_memory_pool().backend_name == "mimalloc"  # left as it was
    assert apply_arrow_pool("auto", defrag_path=defrag(tmp_path, MADVISE)) == "system"
    assert pa.default_memory_pool().backend_name == "system"
    # pyarrow's own variable wins
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "mimalloc")
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    assert apply_arrow_pool("system", defrag_path=defrag(tmp_path, MADVISE)) is None
    assert pa.default_memory_pool().backend_name == "mimalloc"


def test_before_pyarrow_loads_only_its_variable_is_set(tmp_path):
    """A command that never loads pandas pays no pyarrow import; pyarrow then takes the pool
    from its variable when it first allocates."""
    path = defrag(tmp_path, MADVISE)
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from gpuwarden.tuning import apply_arrow_pool\n"
        f"print(apply_arrow_pool('auto', defrag_path=Path({str(path)!r})))\n"
        "print('pyarrow' in sys.modules, os.environ['ARROW_DEFAULT_MEMORY_POOL'])\n"
        "import pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.split()  # fmt: skip
    assert out == ["system", "False", "system", "system"]


def test_the_cli_refuses_a_bad_pool(monkeypatch, arrow_pool):
    monkeypatch.setenv("GPUWARDEN_ARROW_MEMORY_POOL", "tcmalloc")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0 and "arrow_memory_pool must be one of" in result.output


# -- scoring threads ------------------------------------------------------------------------


@pytest.fixture
def score_threads(monkeypatch):
    """The score_threads setting and OMP_NUM_THREADS restored after the test; OpenMP loaded."""
    import sklearn.ensemble  # noqa: F401  (loads the OpenMP runtime the trees use)

    from gpuwarden import tuning

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = tuning._score_threads
    yield tuning
    tuning._score_threads = before


def _openmp_threads() -> set[int]:
    from threadpoolctl import threadpool_info

    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"}


def test_scoring_runs_on_the_threads_the_setting_gives(score_threads, monkeypatch):
    outside = _openmp_threads()
    assert outside
    for n in (1, 3):
        score_threads.apply_score_threads(n)
        with score_threads.scoring_threads():
            assert _openmp_threads() == {n}
        assert _openmp_threads() == outside  # restored after the block
    score_threads.apply_score_threads(0)  # OpenMP's own default
    with score_threads.scoring_threads():
        assert _openmp_threads() == outside
    score_threads.apply_score_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # OpenMP's own switch wins
    with score_threads.scoring_threads():
        assert _openmp_threads() == outside


def test_the_cli_refuses_a_negative_thread_count(monkeypatch, score_threads):
    with pytest.raises(ConfigError, match="score_threads must be 0"):
        score_threads.apply_score_threads(-1)
    monkeypatch.setenv("GPUWARDEN_SCORE_THREADS", "-2")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0 and "score_threads must be 0" in result.output
    monkeypatch.setenv("GPUWARDEN_SCORE_THREADS", "four")
    result = CliRunner().invoke(main, ["fields"])
    assert result.exit_code != 0 and "score_threads must be a int" in result.output
