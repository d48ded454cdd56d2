"""The ``xid_severity`` file: loaded over the shipped table, validated, used by describe and
the hard signals, never by the model's features, and never able to condemn hardware for an
application or driver Xid."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden import health
from gpuwarden.cli import main
from gpuwarden.errors import ConfigError
from gpuwarden.health import (
    DEFAULT_XID_TABLE,
    FATAL_XID,
    FATAL_XIDS,
    describe,
    event_signal,
    load_xid_severity,
    use_xid_severity,
    xid_table,
)

TABLE = """
[xid.79]
class = "ignore"
fatal = false

[xid.13]
action = "Tell the job's owner."

[xid.149]
class = "hardware"
fatal = true
name = "NVLink/C2C error"
action = "Drain the GPU."
"""


@pytest.fixture(autouse=True)
def shipped_table_after():
    yield
    use_xid_severity(None)


def test_default_table_is_unchanged():
    assert xid_table() is DEFAULT_XID_TABLE
    assert xid_table().fatal == FATAL_XIDS == {48, 62, 64, 74, 79, 94, 95, 119, 120}
    for code in (13, 31, 43, 45):  # application and driver Xids never condemn hardware
        assert describe(code).cls in ("application", "driver")
        assert event_signal("xid", code) is None


def test_a_file_edits_describe_and_the_hard_signals(tmp_path):
    path = tmp_path / "xids.toml"
    path.write_text(TABLE)
    table = use_xid_severity(path)
    assert table.source == str(path)
    assert describe(79).cls == "ignore" and event_signal("xid", 79) is None
    assert describe(13).action == "Tell the job's owner." and describe(13).cls == "application"
    assert describe(149).name == "NVLink/C2C error" and event_signal("xid", 149) is FATAL_XID
    assert event_signal("xid", 48) is FATAL_XID  # rows not in the file keep the shipped values
    # the shipped table, which the model's features use, is untouched
    assert FATAL_XIDS == DEFAULT_XID_TABLE.fatal and 79 in FATAL_XIDS
    assert health.XIDS[79].cls == "hardware"
    use_xid_severity(None)
    assert event_signal("xid", 79) is FATAL_XID


def test_the_model_features_keep_the_shipped_table(tmp_path):
    from gpuwarden.models import panel

    path = tmp_path / "xids.toml"
    path.write_text(TABLE)
    use_xid_severity(path)
    assert panel.FATAL_XIDS == FATAL_XIDS  # the name panel counts xid_fatal with
    assert panel.DEFAULT_XID_TABLE.describe(79).cls == "hardware"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[xid.13]\nclass = "gpu"\n', "class 'gpu' must be one of hardware, application"),
        ('[xid.abc]\nclass = "hardware"\n', r"\[xid.abc\]: the code must be an integer"),
        ("[xid.13]\nfatal = true\n", "a application Xid cannot be fatal"),
        ('[xid.45]\nclass = "driver"\nfatal = true\n', "a driver Xid cannot be fatal"),
        ('[xid.79]\nclass = "ignore"\nfatal = true\n', "a ignore Xid cannot be fatal"),
        ('[xid.13]\nfatal = "yes"\n', "fatal must be true or false"),
        ('[xid.13]\ncolour = "red"\n', "unknown key"),
        ("[xid.999]\nfatal = false\n", "does not know Xid 999; give its class"),
        ('[xids.13]\nclass = "hardware"\n', "unknown table"),
        ("[xid.13\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_with_a_clear_error(tmp_path, text, error):
    path = tmp_path / "xids.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=error):
        load_xid_severity(path)
    assert xid_table() is DEFAULT_XID_TABLE


def test_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_xid_severity(tmp_path / "nope.toml")


def test_the_setting_reaches_the_cli(tmp_path):
    path = tmp_path / "xids.toml"
    path.write_text(TABLE)
    result = CliRunner().invoke(main, ["fields"], env={"GPUWARDEN_XID_SEVERITY": str(path)})
    assert result.exit_code == 0
    assert describe(79).cls == "ignore"
    path.write_text('[xid.13]\nclass = "gpu"\n')
    result = CliRunner().invoke(main, ["fields"], env={"GPUWARDEN_XID_SEVERITY": str(path)})
    assert result.exit_code == 1 and "class 'gpu'" in result.output


def test_hard_signal_assessor_follows_the_table(tmp_path):
    from gpuwarden.alerts.hard_signals import _event_signal

    row = pd.Series({"ts": 10.0, "kind": "xid", "code": np.int64(79), "detail": ""})
    assert _event_signal(row) is not None
    path = tmp_path / "xids.toml"
    path.write_text(TABLE)
    use_xid_severity(path)
    assert _event_signal(row) is None
