"""What the node agent measures on its GPUs between two syncs: utilisation and energy.

The sleep controller needs utilisation, not allocation (a node whose GPUs are allocated may sit
idle, and one whose GPUs are free may run work outside the scheduler), and billing needs energy
measured, not GPU-hours x board power. ``GpuMeter.sample`` is called at every agent step and
reads, per GPU, through ``collectors.libnvml.DeviceQuery`` (so NVML's errors are sorted the way
the collectors sort them):

- ``nvmlDeviceGetUtilizationRates().gpu`` (percent of time a kernel ran in NVML's last sample
  period); the sync carries the mean of the samples since the last sync that the service took;
- ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and later): the
  sync carries the increase. A reading below the previous one means the driver was reloaded:
  the counter restarted at 0, so the increase is the new reading (Prometheus's ``increase``
  rule); the energy between the last reading and the reload is not seen;
- where the counter is not offered, ``nvmlDeviceGetPowerUsage`` (mW) integrated over the time
  between two readings (trapezoid); a missing reading leaves that span out.

Missing is never zero: a GPU that offers neither is sent without ``energy_mj``, one that gives
no utilisation without ``util_pct``, and ``span_s`` says how many seconds the energy covers, so
the service can tell a partly measured interval from a whole one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuwarden.collectors.libnvml import DeviceQuery, GpuGone, init, shutdown

logger = logging.getLogger("gpuwarden.scheduler.meter")


@dataclass
class _Gpu:
    index: int
    util_sum: float = 0.0
    util_n: int = 0
    energy_mj: float = 0.0
    span_s: float = 0.0
    counter: float | None = None  # last energy counter reading (mJ)
    counter_at: float | None = None
    power_w: float | None = None  # last power reading, where there is no counter
    power_at: float | None = None

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index}
        if self.util_n:
            out["util_pct"] = round(self.util_sum / self.util_n, 3)
        if self.span_s > 0:
            out["energy_mj"] = round(self.energy_mj, 3)
            out["span_s"] = round(self.span_s, 3)
        return out

    def clear(self) -> None:
        self.util_sum, self.util_n, self.energy_mj, self.span_s = 0.0, 0, 0.0, 0.0


class GpuMeter:
    """Samples ``indices`` (all the host's GPUs when None) of ``nvml`` (pynvml or the test
    fake). ``clock``: monotonic seconds (tests pass their own)."""

    def __init__(
        self,
        nvml: Any,
        indices: Iterable[int] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml, self.clock = nvml, clock
        count = init(nvml)
        wanted = range(count) if indices is None else [i for i in indices if 0 <= i < count]
        self.gpus = {i: _Gpu(i) for i in wanted}

    def close(self) -> None:
        shutdown(self.nvml)

    def sample(self) -> None:
        """One reading of every GPU; a GPU NVML calls lost is skipped until it answers."""
        now = self.clock()
        for g in self.gpus.values():
            try:
                self._read(g, now)
            except GpuGone as exc:
                logger.warning("GPU %d not measured: %s", g.index, exc.detail)

    def _read(self, g: _Gpu, now: float) -> None:
        handle = DeviceQuery(self.nvml).call("nvmlDeviceGetHandleByIndex", g.index)
        if handle is None:
            return
        q = DeviceQuery(self.nvml, handle)
        util = q.call("nvmlDeviceGetUtilizationRates")
        if util is not None and getattr(util, "gpu", None) is not None:
            g.util_sum += float(util.gpu)
            g.util_n += 1
        counter = q.call("nvmlDeviceGetTotalEnergyConsumption")
        if counter is not None:
            value = float(counter)
            if g.counter is not None and g.counter_at is not None:
                g.energy_mj += value - g.counter if value >= g.counter else value
                g.span_s += now - g.counter_at
            g.counter, g.counter_at = value, now
            return
        g.counter = g.counter_at = None
        mw = q.call("nvmlDeviceGetPowerUsage")
        watts = None if mw is None else float(mw) / 1000.0
        if watts is not None and g.power_w is not None and g.power_at is not None:
            dt = now - g.power_at
            g.energy_mj += (watts + g.power_w) / 2 * dt * 1000.0
            g.span_s += dt
        g.power_w, g.power_at = (watts, now) if watts is not None else (None, None)

    def report(self) -> list[dict[str, Any]]:
        """Per GPU since the last ``acknowledged``: mean ``util_pct``, ``energy_mj`` and the
        ``span_s`` it covers; a GPU with nothing measured carries its index alone."""
        return [g.report() for g in self.gpus.values()]

    def acknowledged(self) -> None:
        """The service took the last report: start the next interval."""
        for g in self.gpus.values():
            g.clear()


def open_meter(nvml: Any) -> GpuMeter | None:
    """A meter over ``nvml``, or None (logged once) when NVML cannot start: the service then
    judges the node by its GPUs' allocation alone, and bills energy from board power."""
    from gpuwarden.errors import CollectorUnavailable

    try:
        return GpuMeter(nvml)
    except CollectorUnavailable as exc:
        logger.warning(
            "GPU utilisation and energy are not measured (%s): the service uses allocation", exc
        )
        return None


__all__ = ["GpuMeter", "open_meter"]
