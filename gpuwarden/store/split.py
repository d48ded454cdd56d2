"""A telemetry store read together with the verdict store ``serve --verdicts`` writes to.

Where the telemetry store takes no writes (a Prometheus server), ``serve`` keeps its verdicts
in another store (``--verdicts``, by default ``sqlite:///gpuwarden-verdicts.db``). Readers of
the stored verdicts (the weekly report) then read telemetry from one and verdicts from the
other: ``WithVerdicts(telemetry, verdicts)`` answers ``read_verdicts`` from ``verdicts`` and
everything else from ``telemetry``; ``close`` closes both.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

#: Where ``serve`` writes its verdicts when its telemetry store takes no writes (relative to
#: its working directory).
DEFAULT_VERDICTS = "gpuwarden-verdicts.db"


class WithVerdicts:
    def __init__(self, telemetry: Any, verdicts: Any) -> None:
        self.telemetry = telemetry
        self.verdicts = verdicts

    def read_verdicts(self, **kw: Any) -> pd.DataFrame:
        return self.verdicts.read_verdicts(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.telemetry, name)

    def close(self) -> None:
        try:
            self.verdicts.close()
        finally:
            self.telemetry.close()
