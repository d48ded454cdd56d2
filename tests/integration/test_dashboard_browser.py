"""The dashboard served by ``streamlit run`` on 127.0.0.1, loaded in headless Chromium.

Screenshots of the overview, a GPU page, the Decisions page (over a real ``gpuwarden serve``)
and the Energy and spot page over a simulated fleet; the test fails when a page shows a Streamlit exception box, does not
finish drawing, or comes out blank. ``make
screenshots`` runs the same code (gpuwarden/dashboard/screenshots.py) to refresh docs/img/.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpuwarden.dashboard._browser import blank_reason, find_chromium
from gpuwarden.dashboard.screenshots import Shot, capture, local_serve, pick_gpu
from gpuwarden.demo import demo_store
from gpuwarden.errors import GpuwardenError
from gpuwarden.models.artifact import load_model

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
    # the demo store's backfilled hourly verdicts, drawn over time; the dashboard scores nothing
    line = load_model().threshold  # the shipped model card's at-risk line
    assert f"Risk score against the {line:g} line" in detail.text
    assert "No verdicts are stored yet" not in overview.text


def test_decisions_and_scheduler_pages_render(chromium: str, tmp_path: Path) -> None:
    # seed 1: six boards end the day on a hard signal, still in their slots (a board already
    # replaced is out of the fleet, and serve decides nothing on it)
    url = demo_store(tmp_path / "fleet.db", nodes=8, days=1.0, seed=1, accel=200.0)
    with local_serve(url, lookback_s=86400.0) as serve_url:
        shots = [Shot("decisions", "view=decisions"), Shot("scheduler", "view=scheduler")]
        extra = ("--serve-url", serve_url)
        decisions, scheduler = capture(
            url, tmp_path / "img", shots, chromium=chromium, height=1600, extra=extra
        )
    assert "Decisions" in decisions.text and serve_url in decisions.text
    # the fleet's hard signals, decided by serve (the table itself is drawn on a canvas)
    shown = re.search(r"(\d+) of the last (\d+) audit rows", decisions.text)
    assert shown is not None and int(shown.group(1)) > 0, decisions.text[-500:]
    # the override form asks for a token of the person's own; the dashboard's only reads
    assert (
        "Your serve token" in decisions.text
        and "GPUWARDEN_SERVE_TOKEN only reads" in decisions.text
    )
    assert "No scheduler is configured" in scheduler.text
    assert blank_reason(decisions.path) is None


def test_energy_page_renders(chromium: str, tmp_path: Path) -> None:
    """The Energy and spot page over a simulated day: kWh by node and the sleep plan drawn
    from the store; without a scheduler it says where the rest comes from."""
    url = demo_store(tmp_path / "fleet.db", nodes=8, days=1.0, seed=3, accel=200.0)
    (page,) = capture(url, tmp_path / "img", [Shot("energy", "view=energy")], chromium=chromium,
                      height=2400)  # fmt: skip
    assert page.path.stat().st_size > 20_000 and blank_reason(page.path) is None
    assert "Energy and spot" in page.text and "kWh and CO2 by node" in page.text
    assert "Idle-node sleep plan" in page.text and "Nodes that would sleep" in page.text
    assert "No scheduler is configured" in page.text


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
