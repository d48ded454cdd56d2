"""The dashboard served by ``streamlit run`` on 127.0.0.1, loaded in headless Chromium.

Screenshots of the overview and a GPU page over a simulated fleet; the test fails when a page
shows a Streamlit exception box, does not finish drawing, or comes out blank. ``make
screenshots`` runs the same code (gpuwarden/dashboard/screenshots.py) to refresh docs/img/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwarden.dashboard._browser import blank_reason, find_chromium
from gpuwarden.dashboard.screenshots import Shot, capture, demo_store, pick_gpu
from gpuwarden.errors import GpuwardenError

pytestmark = pytest.mark.integration


@pytest.fixture
def chromium() -> str:
    path = find_chromium()
    if path is None:
        message = "chromium is not installed (apt-get install -y --no-install-recommends chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}: CI=true, so integration tests may not skip")
        pytest.skip(message)
    return path


def test_overview_and_gpu_pages_render(chromium: str, tmp_path: Path) -> None:
    url = demo_store(tmp_path / "fleet.db", nodes=8, days=1.0, seed=3, accel=200.0)
    gpu = pick_gpu(url)
    assert gpu is not None
    shots = [Shot("overview", "view=overview"), Shot("gpu", f"view=gpu&gpu={gpu}")]
    overview, detail = capture(url, tmp_path / "img", shots, chromium=chromium, height=2000)
    for page in (overview, detail):
        assert page.path.stat().st_size > 20_000
        assert blank_reason(page.path) is None
    assert "GPU fleet health" in overview.text and "Fleet map" in overview.text
    assert "64 GPUs" in overview.text
    assert gpu in detail.text and "Memory minus core temperature" in detail.text


def test_an_exception_box_fails_the_capture(chromium: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken_app.py"
    broken.write_text(
        'import streamlit as st\nst.title("about to fail")\nraise RuntimeError("boom")\n'
    )
    with pytest.raises(GpuwardenError, match="Streamlit exception"):
        capture(
            "sqlite:///unused.db",
            tmp_path / "img",
            [Shot("broken", "")],
            chromium=chromium,
            app=broken,
        )
