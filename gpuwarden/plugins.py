"""Loading code by name: backends by URL scheme, objects by ``module:attr``, lazy package names.

    load_object("gpuwarden.store.sqlite:SqliteStore.from_url")      -> that classmethod
    open_by_scheme(url, BUILTIN, group="gpuwarden.stores", what="store")
    __getattr__ = lazy_exports(__name__, {"load_model": "gpuwarden.models.artifact"})

Collectors, stores and scheduler hooks are chosen by URL: a scheme names a built-in factory as a
``module:attr`` string (imported only when used, so heavy backends stay optional) or, failing
that, an entry point of the package's group (third-party backends). ``--assess`` names a scorer
with the same ``module:attr`` form.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any
from urllib.parse import urlsplit

from gpuwarden.errors import UnknownSchemeError


def load_object(target: str) -> Any:
    """``"package.module:attr.path"`` -> that object; ``"package.module"`` -> the module.

    Raises ``ImportError`` or ``AttributeError`` as importing and ``getattr`` do: the caller
    knows what the name was for and words the error (``--assess``: a ``ConfigError``)."""
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def open_by_scheme(
    url: str, builtin: Mapping[str, str], *, group: str, what: str, **kwargs: Any
) -> Any:
    """Call the factory for ``url``'s scheme with ``(url, **kwargs)``: the built-in
    ``builtin[scheme]`` (a ``module:attr`` string), else the entry point of that name in
    ``group``. ``UnknownSchemeError`` ("no {what} for 'URL': scheme must be one of ...")
    names the built-in schemes when neither has it."""
    scheme = urlsplit(url).scheme
    if scheme in builtin:
        return load_object(builtin[scheme])(url, **kwargs)
    for ep in entry_points(group=group):
        if ep.name == scheme:
            return ep.load()(url, **kwargs)
    known = ", ".join(sorted(builtin))
    raise UnknownSchemeError(f"no {what} for {url!r}: scheme must be one of {known}")


def lazy_exports(module_name: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use of
    ``name`` and returns that module's ``name``; other names raise ``AttributeError`` as a
    module does. The package stays cheap to import: nothing is imported until asked for."""
    exports = dict(exports)

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    return __getattr__


__all__ = ["lazy_exports", "load_object", "open_by_scheme"]
