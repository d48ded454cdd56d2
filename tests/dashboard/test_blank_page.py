"""The blank-page check the browser test relies on (gpuwarden/dashboard/_browser.py)."""

from __future__ import annotations

from pathlib import Path

from known_fleet import require_extra

require_extra("PIL")
from PIL import Image, ImageDraw  # noqa: E402

from gpuwarden.dashboard._browser import blank_reason  # noqa: E402


def png(tmp_path: Path, name: str, draw=None) -> Path:
    img = Image.new("RGB", (800, 600), "white")
    if draw:
        draw(ImageDraw.Draw(img))
    path = tmp_path / name
    img.save(path)
    return path


def test_a_white_page_is_blank(tmp_path):
    assert "nearly uniform" in blank_reason(png(tmp_path, "white.png"))


def test_grey_skeletons_without_text_are_blank(tmp_path):
    def skeleton(d):
        for y in range(40, 560, 60):
            d.rectangle((40, y, 760, y + 30), fill=(190, 190, 190))

    assert "no text" in blank_reason(png(tmp_path, "skeleton.png", skeleton))


def test_a_page_with_text_and_charts_is_not_blank(tmp_path):
    def page(d):
        for y in range(40, 300, 24):
            d.text((40, y), "GPU fleet health node000 GPU 3 unhealthy " * 2, fill="black")
        d.rectangle((40, 320, 400, 560), fill=(46, 158, 91))
        d.line((420, 560, 760, 330), fill=(76, 120, 168), width=3)

    assert blank_reason(png(tmp_path, "page.png", page)) is None
