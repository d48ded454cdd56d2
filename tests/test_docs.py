"""Every setting and every command is documented (as sqlite-utils and datasette test theirs)."""

from pathlib import Path

import pytest

from gpuwarden.cli import main
from gpuwarden.config import SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_setting_documented(setting):
    text = (DOCS / "configuration.md").read_text()
    assert f"`{setting.name}`" in text and f"`{setting.env}`" in text


@pytest.mark.parametrize("command", sorted(main.commands))
def test_command_documented(command):
    text = (DOCS / "guide.md").read_text()
    assert f"gpuwarden {command}" in text, f"docs/guide.md does not document `gpuwarden {command}`"
