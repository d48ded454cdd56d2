"""``gpuwarden.plugins``: objects by ``module:attr``, backends by URL scheme, lazy package names."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from gpuwarden import plugins
from gpuwarden.errors import UnknownSchemeError
from gpuwarden.plugins import lazy_exports, load_object, open_by_scheme

BUILTIN = {"echo": "builtins:dict", "path": "os.path:join"}


def test_load_object_follows_module_and_attribute_path():
    from gpuwarden.store.sqlite import SqliteStore

    assert load_object("gpuwarden.store.sqlite:SqliteStore.from_url") == SqliteStore.from_url
    assert load_object("os.path").join("a", "b") == "a/b"


def test_load_object_raises_what_import_and_getattr_raise():
    with pytest.raises(ImportError):
        load_object("gpuwarden.no_such_module:thing")
    with pytest.raises(AttributeError):
        load_object("gpuwarden.errors:NoSuchError")


def echo_factory(url, **kwargs):
    return url, kwargs


def test_builtin_scheme_calls_its_factory_with_the_url_and_keywords():
    builtin = {"echo": f"{__name__}:echo_factory"}
    got = open_by_scheme("echo://x?a=1", builtin, group="gpuwarden.nothing", what="thing", b=2)
    assert got == ("echo://x?a=1", {"b": 2})


def test_entry_point_answers_a_scheme_the_builtins_lack(monkeypatch):
    seen = {}

    def factory(url, **kwargs):
        seen.update(url=url, **kwargs)
        return "made"

    ep = SimpleNamespace(name="custom", load=lambda: factory)
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: [ep] if group == "gpuwarden.things" else []
    )
    got = open_by_scheme(
        "custom://h", BUILTIN, group="gpuwarden.things", what="thing", dry_run=True
    )
    assert got == "made" and seen == {"url": "custom://h", "dry_run": True}


def test_unknown_scheme_names_the_builtins():
    with pytest.raises(UnknownSchemeError) as err:
        open_by_scheme("gopher://x", BUILTIN, group="gpuwarden.nothing", what="widget")
    assert str(err.value) == "no widget for 'gopher://x': scheme must be one of echo, path"


def test_the_backend_openers_keep_their_messages():
    from gpuwarden.collectors import open_collector
    from gpuwarden.scheduler_hooks import open_tagger
    from gpuwarden.store import open_store

    with pytest.raises(UnknownSchemeError, match="no collector for 'gopher://x': scheme must"):
        open_collector("gopher://x")
    with pytest.raises(UnknownSchemeError, match="no store for 'gopher://x': scheme must"):
        open_store("gopher://x")
    with pytest.raises(UnknownSchemeError, match="no scheduler hook for 'gopher://x'"):
        open_tagger("gopher://x")


def test_lazy_exports_import_on_first_use_only():
    getattr_ = lazy_exports("pkg", {"join": "os.path", "dumps": "json"})
    assert getattr_("join")("a", "b") == "a/b"
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        getattr_("nope")


def test_models_and_closedloop_stay_lazy():
    code = (
        "import sys, gpuwarden.models, gpuwarden.closedloop\n"
        "heavy = [m for m in ('sklearn', 'numpy', 'gpuwarden.closedloop.run') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "from gpuwarden.closedloop import WorkloadSpec\n"
        "assert 'gpuwarden.closedloop.workload' in sys.modules\n"
        "assert callable(gpuwarden.models.load_model)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
