"""The simulator's HBM errors against the real Calchas log, at the log's hourly resolution.

    .venv/bin/python bench/calchas_vs_sim.py                 # real log, sim before and after
    .venv/bin/python bench/calchas_vs_sim.py --data FILE --nodes 32

Both sources become per-device hourly counts of corrected (real CE, simulated single-bit) and
uncorrectable (real UER + UEO, simulated double-bit) errors; the same statistics are computed
on each and printed as one Markdown table (docs/simulator.md, "HBM errors against a real log"):
whether a device's first uncorrectable error came after corrected ones, how errors come in
bursts, the time between them, and how they spread over rows and banks (the real log's
addresses; the simulator has none, and NVIDIA reports none, so its column shows the rows
remapped per error instead). The simulated fleet is ``simdata.fleet_spec`` (three GPU models,
10-minute samples, failure rate x20) run twice: with ``hbm_sudden_fraction=0`` (the simulator
before this comparison) and with its default. ``--data`` or $GPUWARDEN_CALCHAS overrides the
log's path (default ../shared/data/calchas/hbm_errors.csv from the repository root).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from gpuwarden.collectors.memory_errors import errors_frame, read_calchas_csv
from gpuwarden.models.simdata import fleet_spec, simulate_panel
from gpuwarden.sim import FleetSpec

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".." / "shared" / "data" / "calchas" / "hbm_errors.csv"
HOUR = 3600.0


def real_hours(errors: pd.DataFrame) -> pd.DataFrame:
    """(device, hour, ce, ue) with a row per hour holding any error."""
    e = errors.assign(hour=np.floor(errors["ts"] / HOUR).astype(np.int64))
    out = e.groupby(["uuid", "hour"]).agg(
        ce=("uncorrectable", lambda s: int((~s).sum())), ue=("uncorrectable", "sum")
    )
    return out.reset_index().rename(columns={"uuid": "device"})


def sim_hours(panel) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same from a simulated panel's hourly SBE / DBE increases, and per board: rows
    remapped (correctable, uncorrectable) and the failure kind."""
    sbe = np.nan_to_num(panel.inc["sbe"])
    dbe = np.nan_to_num(panel.inc["dbe"])
    t, g = np.nonzero((sbe > 0) | (dbe > 0))
    hours = pd.DataFrame(
        {
            "device": panel.keys["key"].to_numpy()[g],
            "hour": (panel.hours[t] // HOUR).astype(np.int64),
            "ce": sbe[t, g].astype(np.int64),
            "ue": dbe[t, g].astype(np.int64),
        }
    )
    boards = pd.DataFrame(
        {
            "device": panel.keys["key"].to_numpy(),
            "kind": panel.keys["fail_kind"].fillna("").to_numpy(),
            "remap_c": np.nansum(panel.inc["remap_c"], axis=0),
            "remap_u": np.nansum(panel.inc["remap_u"], axis=0),
        }
    )
    return hours, boards


def _q(values, qs=(0.5, 0.9)) -> str:
    v = np.asarray(values, dtype=np.float64)
    if not v.size:
        return "-"
    parts = [_n(np.quantile(v, q)) for q in qs]
    return " / ".join(parts) + f" / {_n(v.max())}"


def _n(x: float) -> str:
    """Whole and thousands separated from 100 up (``.3g`` wrote 5.46e+03), else 3 digits."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def statistics(hours: pd.DataFrame) -> dict[str, str]:
    """The comparison's rows from (device, hour, ce, ue)."""
    out: dict[str, str] = {}
    h = hours[(hours["ce"] > 0) | (hours["ue"] > 0)].sort_values(["device", "hour"])
    out["devices with any error"] = str(h["device"].nunique())
    first_ue = h[h["ue"] > 0].groupby("device")["hour"].min()
    first_ce = h[h["ce"] > 0].groupby("device")["hour"].min().reindex(first_ue.index)
    n = len(first_ue)
    before = int((first_ce < first_ue).sum())
    same = int((first_ce <= first_ue).sum())
    out["devices with an uncorrectable error"] = str(n)
    out["... first one after corrected ones (strictly before)"] = (
        f"{before} ({before / n:.0%})" if n else "-"
    )
    out["... corrected ones before or in the same hour"] = f"{same} ({same / n:.0%})" if n else "-"
    ce, ue = h.loc[h["ce"] > 0, "ce"], h.loc[h["ue"] > 0, "ue"]
    out["corrected per active hour (median / p90 / max)"] = _q(ce)
    out["uncorrectable per active hour (median / p90 / max)"] = _q(ue)
    gaps, lengths, sizes, active = [], [], [], []
    for _, g in h.groupby("device", sort=False):
        hr = g["hour"].to_numpy()
        n_err = (g["ce"] + g["ue"]).to_numpy()
        active.append(len(hr))
        d = np.diff(hr)
        gaps += list(d)
        breaks = np.r_[0, np.flatnonzero(d > 1) + 1, len(hr)]
        for a, b in zip(breaks[:-1], breaks[1:], strict=True):
            lengths.append(b - a)
            sizes.append(n_err[a:b].sum())
    out["active hours per device (median / p90 / max)"] = _q(active)
    out["burst length, consecutive active hours (median / p90 / max)"] = _q(lengths)
    out["errors per burst (median / p90 / max)"] = _q(sizes)
    gaps_a = np.asarray(gaps, dtype=np.float64)
    out["hours between active hours (median / p90 / max)"] = _q(gaps_a)
    out["... gaps of a day or less"] = f"{(gaps_a <= 24).mean():.0%}" if gaps_a.size else "-"
    return out


def real_spread(errors: pd.DataFrame) -> dict[str, str]:
    """Rows and banks per device, from the addresses."""
    bank = errors[["stack", "sid", "pc", "bg", "ba"]].astype(str).agg("/".join, axis=1)
    e = errors.assign(bank=bank, rowkey=bank + ":" + errors["row"].astype(str))
    per = e.groupby("uuid").agg(
        errors=("ts", "size"),
        rows=("rowkey", "nunique"),
        banks=("bank", "nunique"),
        top_bank=("bank", lambda s: s.value_counts().iloc[0] / len(s)),
    )
    out = {
        "banks per device (median / p90 / max)": _q(per["banks"]),
        "share of a device's errors in its busiest bank (median)": f"{per['top_bank'].median():.0%}",
    }
    for name, sel in (("corrected", ~e["uncorrectable"]), ("uncorrectable", e["uncorrectable"])):
        g = e[sel].groupby("uuid").agg(n=("ts", "size"), rows=("rowkey", "nunique"))
        out[f"rows per {name} error (pooled; sim: rows remapped)"] = (
            f"{g['rows'].sum() / g['n'].sum():.3f}" if len(g) else "-"
        )
    return out


def sim_spread(hours: pd.DataFrame, boards: pd.DataFrame) -> dict[str, str]:
    tot = hours.groupby("device")[["ce", "ue"]].sum()
    b = boards.set_index("device").reindex(tot.index)
    out = {
        "banks per device (median / p90 / max)": "no addresses",
        "share of a device's errors in its busiest bank (median)": "no addresses",
    }
    for name, col, rem in (("corrected", "ce", "remap_c"), ("uncorrectable", "ue", "remap_u")):
        n = tot[col].sum()
        out[f"rows per {name} error (pooled; sim: rows remapped)"] = (
            f"{b[rem].sum() / n:.3f}" if n else "-"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("GPUWARDEN_CALCHAS", DEFAULT)))
    ap.add_argument("--nodes", type=int, default=64, help="simulated nodes (8 GPUs each)")
    ap.add_argument("--days", type=float, default=60.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    errors = errors_frame(read_calchas_csv(args.data).errors)
    columns = {"real (Calchas)": {**statistics(real_hours(errors)), **real_spread(errors)}}
    default = FleetSpec().hbm_sudden_fraction
    for label, frac in (("sim before (hbm_sudden 0)", 0.0), (f"sim now ({default:g})", default)):
        spec = replace(
            fleet_spec(nodes=args.nodes, days=args.days, seed=5), hbm_sudden_fraction=frac
        )
        hours, boards = sim_hours(simulate_panel(spec, progress=False).panel)
        columns[label] = {**statistics(hours), **sim_spread(hours, boards)}
    table = pd.DataFrame(columns)
    print(f"simulated: {args.nodes * 8} GPUs x {args.days:g} days, fleet_spec(seed=5)\n")
    names = list(table.columns)
    print("| statistic | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for stat, row in table.iterrows():
        print(f"| {stat} | " + " | ".join(str(v) for v in row) + " |")
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
