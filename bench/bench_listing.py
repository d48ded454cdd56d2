"""Listing the GPUs on VictoriaMetrics: every raw sample scanned, against the hourly rollup
series (``_prom_inventory``), on the same store, in one process.

    .venv/bin/python bench/bench_listing.py --gpus 1000 --days 7 --step 15 --workdir /tmp/l15
    .venv/bin/python bench/bench_listing.py --workdir /tmp/w10k     # a bench_backends.py store

Without a store in ``--workdir/vm``, one is written: ``--gpus`` GPUs sampling the presence
series and the use-and-draw fields (random values, as incompressible as real ones) every
``--step`` seconds for ``--days``, then compacted (hourly rollups kept as series). Then the
listing a report makes (three weeks back from half an hour after the history's end) runs both
ways, taking turns, ``--repeat`` times each; each run's wall, client CPU and server CPU
seconds are printed, and the two lists must be equal. The rollups' way is what ``gpus()``
takes where the scrape interval is at most ``ROLLED_MAX_INTERVAL_S``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "store"))
from bench_backends import cpu_s  # noqa: E402
from tsdb_servers import start_victoriametrics  # noqa: E402

from gpuwarden.store import _prom_inventory  # noqa: E402
from gpuwarden.store.prometheus import PRESENCE  # noqa: E402
from gpuwarden.store.victoriametrics import VictoriaMetricsStore  # noqa: E402

END = 1_796_382_000.0


def build(url: str, gpus: int, days: float, step: float) -> dict[str, float]:
    ts = np.arange(END - days * 86400, END, step)
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    with VictoriaMetricsStore(url, clock=lambda: END + 1800) as store:
        for g0 in range(0, gpus, 50):
            parts = []
            for g in range(g0, min(gpus, g0 + 50)):
                n = len(ts)
                parts.append(pd.DataFrame({
                    "ts": ts, "hostname": f"node{g // 8:04d}", "gpu": g % 8, "model": "H100",
                    "uuid": f"GPU-{g:08d}-0000-0000-0000-000000000000", "rack": "r1",
                    "pci_bus_id": f"00000000:{g % 8 + 17:02X}:00.0",
                    "gpu_temp_c": rng.integers(40, 80, n).astype(float),
                    "power_w": np.round(rng.uniform(100, 700, n), 1),
                    "fb_used_mib": rng.integers(0, 80000, n).astype(float),
                    "gpu_util_pct": rng.integers(0, 100, n).astype(float), "fb_total_mib": 81920.0,
                    "gr_engine_active": np.round(rng.uniform(0, 1, n), 3),
                }))  # fmt: skip
            store.write_frame(pd.concat(parts, ignore_index=True))
        store.compact(END + 60)
    print(f"wrote and compacted {gpus:,} GPUs x {days:g} days at {step:g} s in "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    return {"end": END, "gpus": gpus, "days": days, "step": step}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1000)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--step", type=float, default=15.0, help="seconds between samples")
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    meta_file = args.workdir / "meta.json"
    vm = start_victoriametrics(args.workdir / "vm")
    try:
        if not meta_file.exists():
            meta_file.write_text(json.dumps(build(vm.url, args.gpus, args.days, args.step)))
        meta = json.loads(meta_file.read_text())
        now = float(meta["end"]) + 1800
        store = VictoriaMetricsStore(vm.url, clock=lambda: now)
        rolled = store.rolled_until()
        step = float(meta["step"])
        print(f"{meta['gpus']:,} GPUs, {meta['days']:g} days at {step:g} s; rolled up to "
              f"{rolled}")  # fmt: skip
        lists: dict[str, pd.DataFrame] = {}
        for _ in range(args.repeat):
            for way, r in (("raw samples", None), ("rollups", rolled)):
                t, c, s = time.perf_counter(), cpu_s(), cpu_s(vm.proc.pid)
                lists[way] = _prom_inventory.seen(
                    store.api, PRESENCE, now - 21 * 86400, now, rolled=r, interval_s=step
                )
                print(f"  {way:<12} {time.perf_counter() - t:6.2f} s wall {cpu_s() - c:6.2f} "
                      f"client cpu s {cpu_s(vm.proc.pid) - s:6.2f} server cpu s")  # fmt: skip
        store.close()
        a, b = (x.sort_values("uuid", ignore_index=True) for x in lists.values())
        pd.testing.assert_frame_equal(a, b, check_exact=True)
        print(f"the two lists are equal ({len(a):,} GPUs)")
    finally:
        vm.stop()


if __name__ == "__main__":
    main()
