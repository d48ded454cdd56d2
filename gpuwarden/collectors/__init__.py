"""Telemetry sources, chosen by URL.

    open_collector("nvml://")                              this host's GPUs through NVML
    open_collector("smi://?timeout=10")                    nvidia-smi --query-gpu
    open_collector("dcgm+http://node7:9400/metrics")       dcgm-exporter endpoint(s), comma-separated
    open_collector("sim://?nodes=16&gpus=8&seed=1")        a simulated fleet
    open_collector("kmsg://")                              Xid/SXid lines from /dev/kmsg
    open_collector("journal://")                           Xid/SXid entries of the journal

Built-ins are listed here; third-party collectors register a ``gpuwarden.collectors`` entry
point naming a callable ``(url: str) -> Collector``.
"""

from __future__ import annotations

from gpuwarden.collectors.base import Collector
from gpuwarden.plugins import open_by_scheme

#: scheme -> "module:factory"; imported only when used, so heavy sources stay optional.
BUILTIN: dict[str, str] = {
    "nvml": "gpuwarden.collectors.nvml:NvmlCollector.from_url",
    "smi": "gpuwarden.collectors.smi:SmiCollector.from_url",
    "dcgm+http": "gpuwarden.collectors.dcgm:DcgmCollector.from_url",
    "dcgm+https": "gpuwarden.collectors.dcgm:DcgmCollector.from_url",
    "sim": "gpuwarden.collectors.sim:SimCollector.from_url",
    "kmsg": "gpuwarden.collectors.kmsg:KmsgCollector.from_url",
    "journal": "gpuwarden.collectors.journal:JournalCollector.from_url",
}


def open_collector(url: str) -> Collector:
    """Open the collector for ``url``; raises ``UnknownSchemeError`` for an unknown scheme."""
    collector: Collector = open_by_scheme(
        url, BUILTIN, group="gpuwarden.collectors", what="collector"
    )
    return collector


__all__ = ["Collector", "open_collector", "BUILTIN"]
