"""Telemetry sources, chosen by URL.

    open_collector("nvml://")                              this host's GPUs through NVML
    open_collector("smi://?timeout=10")                    nvidia-smi --query-gpu
    open_collector("dcgm+http://node7:9400/metrics")       dcgm-exporter endpoint(s), comma-separated
    open_collector("sim://?nodes=16&gpus=8&seed=1")        a simulated fleet

Built-ins are listed here; third-party collectors register a ``gpuwarden.collectors`` entry
point naming a callable ``(url: str) -> Collector``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from urllib.parse import urlsplit

from gpuwarden.collectors.base import Collector
from gpuwarden.errors import UnknownSchemeError

#: scheme -> "module:factory"; imported only when used, so heavy sources stay optional.
BUILTIN: dict[str, str] = {
    "nvml": "gpuwarden.collectors.nvml:NvmlCollector.from_url",
    "smi": "gpuwarden.collectors.smi:SmiCollector.from_url",
    "dcgm+http": "gpuwarden.collectors.dcgm:DcgmCollector.from_url",
    "dcgm+https": "gpuwarden.collectors.dcgm:DcgmCollector.from_url",
    "sim": "gpuwarden.collectors.sim:SimCollector.from_url",
}


def _load(target: str) -> Callable[[str], Collector]:
    module_name, _, attr = target.partition(":")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def open_collector(url: str) -> Collector:
    """Open the collector for ``url``; raises ``UnknownSchemeError`` for an unknown scheme."""
    scheme = urlsplit(url).scheme
    if scheme in BUILTIN:
        return _load(BUILTIN[scheme])(url)
    for ep in entry_points(group="gpuwarden.collectors"):
        if ep.name == scheme:
            return ep.load()(url)
    known = ", ".join(sorted(BUILTIN))
    raise UnknownSchemeError(f"no collector for {url!r}: scheme must be one of {known}")


__all__ = ["Collector", "open_collector", "BUILTIN"]
