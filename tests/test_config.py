import pytest

from gpuwarden.config import SETTINGS, load_settings, parse_listen
from gpuwarden.errors import ConfigError


def test_defaults_then_file_then_environment(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gpuwarden]\nstore = "sqlite:///from-file.db"\ninterval_s = 30\n')
    values = load_settings(cfg, environ={"GPUWARDEN_INTERVAL_S": "5"})
    assert values["store"] == "sqlite:///from-file.db"
    assert values["interval_s"] == 5.0
    assert values["listen"] == "127.0.0.1:9400"


def test_unknown_setting_is_named(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text("intervall_s = 3\n")
    with pytest.raises(ConfigError, match="intervall_s"):
        load_settings(cfg, environ={})


def test_bad_value_names_the_variable():
    with pytest.raises(ConfigError, match="GPUWARDEN_INTERVAL_S"):
        load_settings(None, environ={"GPUWARDEN_INTERVAL_S": "often"})


def test_missing_or_broken_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("store = \n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(bad, environ={})


def test_every_setting_has_help_and_default():
    for s in SETTINGS:
        assert s.help.endswith(".") and s.default is not None


@pytest.mark.parametrize(
    "listen,expected",
    [
        ("127.0.0.1:9400", ("127.0.0.1", 9400)),
        (":9400", ("0.0.0.0", 9400)),
        ("[::1]:80", ("::1", 80)),
    ],
)
def test_parse_listen(listen, expected):
    assert parse_listen(listen) == expected


def test_parse_listen_rejects_garbage():
    with pytest.raises(ConfigError):
        parse_listen("localhost")
