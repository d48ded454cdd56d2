"""Is anything observable before a "sudden" GPU failure? The simulator and InfiniteHBD.

    .venv/bin/python bench/sudden_precursors.py              # ../shared/data/infinitehbd/
    .venv/bin/python bench/sudden_precursors.py --trace FILE --nodes 32

For each sudden failure, whether the window before it (1 day, 7 days, ending an hour before
the failure: what comes with the failure is no warning) holds something a monitor sees, against the same question asked at random times of the same population (the
chance of seeing it anyway). A signal helps only where the first share is well above the second.

- InfiniteHBD (stepfun-ai, SIGCOMM 2025; 400 servers, 348 days): the trace has no telemetry,
  only fault starts per node. Sudden GPU faults are the classes the simulator maps to its sudden
  kinds (device unknown error, nvidia-smi timeout, GPU Xid error, GPU lost, device not found,
  silent data corruption), and the DBE > threshold faults are shown apart (the Calchas log says
  most uncorrectable errors come without warning). "Observable" is an earlier fault start on the
  same node: a PCIe link trained down ("GPU PCI link width low"), a GPU Xid, another GPU fault,
  a NIC or cable link fault, anything else.
- The simulator (``FleetSpec`` defaults, 20x the failure rate, seed 7): a sudden failure's GPU
  with, in the window, a hardware Xid, a gap in its samples (a node reboot or driver reload), or
  a PCIe link below its width.

``--trace`` or $GPUWARDEN_INFINITEHBD overrides the trace's path (default
../shared/data/infinitehbd/fault_trace.json from the repository root).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.health import DEFAULT_XID_TABLE
from gpuwarden.sim import SUDDEN_KINDS, Fleet, FleetSpec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".." / "shared" / "data" / "infinitehbd" / "fault_trace.json"
DAY = 86400.0
WINDOWS = (1.0, 7.0)  # days
SUDDEN_DESCS = {
    "GPU device unknow error",
    "nvidia-smi Timeout",
    "GPU xid Error",
    "GPU Lost",
    "GPU device not found",
    "Silent Data Corruption",
}
DBE = "GPU DBE(Double Bit ECC) > Threshold"


def _signal(cls: str, desc: str) -> str:
    if desc == "GPU PCI link width low":
        return "PCIe link width low"
    if desc == "GPU xid Error":
        return "GPU Xid"
    if desc == DBE:
        return "DBE > threshold"
    if cls == "GPU":
        return "other GPU fault"
    if cls in ("NIC", "Parameter Plane Cable"):
        return "NIC / cable link"
    return "anything else"


SIGNALS = (
    "PCIe link width low",
    "GPU Xid",
    "DBE > threshold",
    "other GPU fault",
    "NIC / cable link",
    "anything else",
)
SIM_SIGNALS = ("hardware Xid", "sample gap (reboot, driver reload)", "PCIe link width low")
#: What happens within this long before a failure is part of it, not a warning (the
#: simulator's burst, faults logged together): a precursor must come earlier.
LEAD_S = 3600.0


def trace_frame(path: Path) -> pd.DataFrame:
    rows = [
        (
            e["node_id"],
            float(e["event_time"]),
            e["fault_type"]["Class"],
            e["fault_type"]["Desc"],
        )
        for e in json.loads(path.read_text())
        if e["event_type"] == "fault_start"
    ]
    out = pd.DataFrame(rows, columns=["node", "day", "cls", "desc"])
    out["signal"] = [_signal(c, d) for c, d in zip(out["cls"], out["desc"], strict=True)]
    return out.sort_values("day", kind="stable").reset_index(drop=True)


def _seen_before(faults: pd.DataFrame, node: str, day: float, window: float) -> set:
    lead = LEAD_S / DAY
    near = (faults["day"] < day - lead) & (faults["day"] >= day - window)
    return set(faults.loc[near & (faults["node"] == node), "signal"])


def infinitehbd_table(faults: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    groups = {
        "sudden GPU faults": faults[faults["desc"].isin(SUDDEN_DESCS)],
        "DBE > threshold": faults[faults["desc"] == DBE],
    }
    rng = np.random.default_rng(seed)
    nodes = faults["node"].unique()
    span = float(faults["day"].max())
    rows = []
    for window in WINDOWS:
        for name, g in groups.items():
            seen = [_seen_before(faults, r.node, r.day, window) for r in g.itertuples()]
            rows.append(_row(f"InfiniteHBD: {name}", window, seen, SIGNALS))
        at = zip(rng.choice(nodes, 2000), rng.uniform(window, span, 2000), strict=True)
        seen = [_seen_before(faults, n, d, window) for n, d in at]
        rows.append(_row("InfiniteHBD: random node-times (chance)", window, seen, SIGNALS))
    return pd.DataFrame(rows)


def _row(name: str, window: float, seen: list[set], signals: tuple[str, ...]) -> dict:
    out: dict = {"what": name, "window d": window, "n": len(seen)}
    out["anything"] = np.mean([bool(s) for s in seen]) if seen else np.nan
    for sig in signals:
        out[sig] = np.mean([sig in s for s in seen]) if seen else np.nan
    return out


@dataclass
class _Observed:
    """What a monitor of the simulated fleet sees: hardware Xids per uuid, node resets (the
    gaps in samples), and slots whose PCIe link is below full width."""

    xids: pd.DataFrame  # ts, uuid
    resets: pd.DataFrame  # ts, host
    links: pd.DataFrame  # ts, slot

    def before(self, ts: float, window_s: float, gpu) -> set:
        lo, hi = ts - window_s, ts - LEAD_S
        out = set()
        x, r, k = self.xids, self.resets, self.links
        if ((x["uuid"] == gpu.uuid) & (x["ts"] < hi) & (x["ts"] >= lo)).any():
            out.add("hardware Xid")
        if ((r["host"] == gpu.hostname) & (r["ts"] < hi) & (r["ts"] >= lo)).any():
            out.add("sample gap (reboot, driver reload)")
        near = k[(k["ts"] < hi) & (k["ts"] >= lo)]
        if any(s == (gpu.hostname, gpu.index) for s in near["slot"]):
            out.add("PCIe link width low")
        return out


def _observe(fleet: Fleet, step_s: int) -> _Observed:
    hw, width_low = [], []
    for chunk in fleet.chunks(progress=False, frames=False):
        hw += [
            (e.ts, e.gpu.uuid)
            for e in chunk.events
            if e.kind == "xid" and DEFAULT_XID_TABLE.describe(int(e.code or 0)).cls == "hardware"
        ]
        width = chunk.arrays["pcie_link_width"]
        low = (width < chunk.arrays["pcie_link_width_max"]) & chunk.alive
        for k, g in zip(*np.nonzero(low), strict=True):
            width_low.append((chunk.start_ts + k * step_s, fleet.slots[g]))
    return _Observed(
        pd.DataFrame(hw, columns=["ts", "uuid"]),
        pd.DataFrame([(r.ts, r.hostname) for r in fleet.resets], columns=["ts", "host"]),
        pd.DataFrame(width_low, columns=["ts", "slot"]),
    )


def simulator_table(nodes: int, days: float, seed: int = 7) -> pd.DataFrame:
    spec = FleetSpec(nodes=nodes, days=days, step_s=600, accel=20, seed=seed)
    fleet = Fleet(spec)
    seen = _observe(fleet, spec.step_s)
    rng = np.random.default_rng(seed)
    first = spec.start_ts + 7 * DAY  # a week of history before every judged time
    sudden = [f for f in fleet.failures if f.kind in SUDDEN_KINDS and f.ts > first]
    failing = {f.gpu.uuid for f in fleet.failures}
    healthy = [g for g in fleet.gpus if g.uuid not in failing]
    picks = rng.choice(len(healthy), 2000)
    times = rng.uniform(first, spec.start_ts + spec.days * DAY, 2000)
    rows = []
    for window in WINDOWS:
        for kind in (None, "hbm_uncorrectable"):
            fs = [f for f in sudden if kind is None or f.kind == kind]
            got = [seen.before(f.ts, window * DAY, f.gpu) for f in fs]
            rows.append(_row(f"simulator: {kind or 'all sudden'}", window, got, SIM_SIGNALS))
        got = [seen.before(t, window * DAY, healthy[i]) for i, t in zip(picks, times, strict=True)]
        rows.append(_row("simulator: random healthy GPU-times (chance)", window, got, SIM_SIGNALS))
    return pd.DataFrame(rows)


def _cell(column: str, value: object) -> str:
    if column == "window d" or not isinstance(value, float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return f"{value:.0%}"


def markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1)]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(c, v) for c, v in zip(cols, row, strict=True)) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--trace", type=Path, default=Path(os.environ.get("GPUWARDEN_INFINITEHBD", DEFAULT))
    )
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--days", type=float, default=60.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    print(markdown(infinitehbd_table(trace_frame(args.trace))), "\n")
    print(markdown(simulator_table(args.nodes, args.days)))
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
