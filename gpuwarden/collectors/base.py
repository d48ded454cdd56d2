"""The collector protocol: one ``collect()`` that returns a ``Batch``.

A collector never raises for one bad GPU or one endpoint down: it returns what it could read and
names the rest in ``Batch.problems``. It raises ``CollectorUnavailable`` only when the whole
source is missing (no NVML library, no nvidia-smi binary).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpuwarden.telemetry import Batch


@runtime_checkable
class Collector(Protocol):
    #: The URL the collector was opened with, secrets removed; shown in logs and health.
    url: str

    def collect(self) -> Batch:
        """Read every GPU once."""
        ...

    def close(self) -> None: ...
