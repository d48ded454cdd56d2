"""Per job class power and utilisation samples for ``energy.advise``: from the store, or a CSV.

The store holds each GPU's power (``DCGM_FI_DEV_POWER_USAGE``, ``nvidia-smi
--query-gpu=power.draw``) and utilisation (``DCGM_FI_DEV_GPU_UTIL``) but not what ran on it;
the job class of a GPU at a time comes from one of:

- the bundled scheduler's database (``gpuwarden scheduler serve --db``): every task's node,
  GPUs, start and end, and its job's priority class (inference, training, batch, dev), the
  classes the agent's power plans (``--power-plan``) are keyed by;
- the store's Kubernetes assignments (dcgm-exporter's pod labels): the namespace is the class.

A sample counts for a class when its GPU ran that class's task in its 5-minute bucket (the
store's 300 s rollup: mean power and utilisation; a shared GPU counts for each class on it).
A GPU's board power is its model's (``BOARD_POWER_W``), else the largest enforced power limit
the store saw for it (``power_limit_w``); a class with neither is refused by name.
"""

from __future__ import annotations

import csv
import json
import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError
from gpuwarden.planning.energy import PowerAdvice, advise
from gpuwarden.scheduler.billing import BOARD_POWER_W
from gpuwarden.scheduler.mig import canonical_model

#: the store's rollup the advice reads (mean power and utilisation per 5 minutes)
RESOLUTION_S = 300
FIELDS = ("power_w", "gpu_util_pct", "power_limit_w")


@dataclass
class ClassSamples:
    """Per class: power (W) and utilisation (%) samples, and the board power (W). ``source``
    says where the classes came from (shown under the advice)."""

    source: str
    power: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    util: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    board: dict[str, float] = field(default_factory=dict)

    def advice(self, *, clock_cut: float = 0.2) -> list[PowerAdvice]:
        """``energy.advise`` for every class, by name."""
        return [advise(c, self.power[c], self.util[c], self.board[c], clock_cut=clock_cut)
                for c in sorted(self.power)]  # fmt: skip


def read_csv(path: Path) -> ClassSamples:
    """``job_class,power_w,util_pct,board_w`` rows, one per GPU sample (an empty power or
    utilisation cell is not measured)."""
    out = ClassSamples(f"`{path}`")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"job_class", "power_w", "util_pct", "board_w"}
        if not need <= set(reader.fieldnames or ()):
            raise InputError(f"{path}: needs the columns {', '.join(sorted(need))}")
        for line, row in enumerate(reader, start=2):
            try:
                c = row["job_class"].strip()
                out.power[c].append(float(row["power_w"] or "nan"))
                out.util[c].append(float(row["util_pct"] or "nan"))
                out.board[c] = float(row["board_w"])
            except ValueError as exc:
                raise InputError(f"{path}:{line}: {exc}") from None
    if not out.power:
        raise InputError(f"{path}: no samples")
    return out


def scheduler_intervals(path: str | Path) -> pd.DataFrame:
    """hostname, gpu, lo, hi (unix s; hi inf while running), cls: every task that started, from
    the bundled scheduler's database, opened read only (a running service keeps writing it)."""
    if not Path(path).is_file():
        raise InputError(f"{path}: no such scheduler database")
    try:
        conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            classes = {j: str(json.loads(spec).get("priority") or "batch")
                       for j, spec in conn.execute("SELECT job_id, spec FROM jobs")}  # fmt: skip
            tasks = conn.execute("SELECT job_id, node, gpus, started_at, ended_at FROM tasks"
                                 " WHERE started_at IS NOT NULL").fetchall()  # fmt: skip
        finally:
            conn.close()
    except (sqlite3.Error, ValueError) as exc:
        raise InputError(f"{path}: not a readable scheduler database ({exc})") from None
    rows = [(node, int(g), started, math.inf if ended is None else ended,
             classes.get(job, "batch"))
            for job, node, gpus, started, ended in tasks for g in json.loads(gpus)]  # fmt: skip
    return pd.DataFrame(rows, columns=["hostname", "gpu", "lo", "hi", "cls"])


def namespace_intervals(assignments: pd.DataFrame) -> pd.DataFrame:
    """uuid, lo, hi, cls from the store's Kubernetes assignments (namespace as the class)."""
    a = assignments[assignments["namespace"].astype(str) != ""]
    return pd.DataFrame({"uuid": a["uuid"].astype(str), "lo": a["ts_from"].astype(float),
                         "hi": a["ts_to"].astype(float).fillna(math.inf),
                         "cls": a["namespace"].astype(str)})  # fmt: skip


def from_store(
    store: Any, start: float, end: float, *, scheduler_db: str | Path | None = None
) -> ClassSamples:
    """The samples of ``[start, end)`` per job class (see the module's docstring)."""
    if scheduler_db is not None:
        spans, on, source = scheduler_intervals(scheduler_db), ["hostname", "gpu"], (
            f"the scheduler database `{scheduler_db}` (job priority classes)")  # fmt: skip
    else:
        spans, on = namespace_intervals(store.read_assignments(start=start, end=end)), ["uuid"]
        source = "the store's Kubernetes assignments (namespaces)"
    spans = spans[(spans["hi"] > start) & (spans["lo"] < end)]
    if spans.empty:
        raise InputError(
            f"no job ran on a GPU between {_iso(start)} and {_iso(end)} by {source}: give "
            "--scheduler-db FILE (the bundled scheduler's database), or a CSV of samples"
        )
    frame = store.read_window(start=start, end=end, fields=list(FIELDS), resolution_s=RESOLUTION_S)
    return classify(frame, spans, on, source)


def classify(
    frame: pd.DataFrame, spans: pd.DataFrame, on: Sequence[str], source: str
) -> ClassSamples:
    """Samples of ``frame`` (the wide layout) whose bucket falls in a span of ``spans``
    (joined on ``on``), grouped by the span's class."""
    out = ClassSamples(source)
    if frame.empty:
        raise InputError(f"the store holds no GPU samples in the window of {source}")
    # an interval join by binary search: per GPU its samples sorted by time, per span the
    # slice [lo, hi) of them (a merge on the GPU alone pairs every sample with every span)
    key = _key(frame, on)
    order = np.lexsort((frame["ts"].to_numpy(float), key))
    key, ts = key[order], frame["ts"].to_numpy(float)[order]
    firsts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    bounds = dict(zip(key[firsts], zip(firsts, np.r_[firsts[1:], key.size], strict=True),
                      strict=True))  # fmt: skip
    picked: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for k, lo, hi, cls in zip(_key(spans, on), spans["lo"].to_numpy(float),
                              spans["hi"].to_numpy(float), spans["cls"].astype(str), strict=True):  # fmt: skip
        if k not in bounds:
            continue
        a, b = bounds[k]
        i, j = a + np.searchsorted(ts[a:b], lo), a + np.searchsorted(ts[a:b], hi)
        if j > i:
            picked.append(order[i:j])
            classes.append(np.full(j - i, cls, dtype=object))
    cols = [c for c in FIELDS if c in frame] + ["model"]
    rows_at = np.concatenate(picked) if picked else np.zeros(0, dtype=int)
    joined = (
        frame[cols]
        .iloc[rows_at]
        .assign(cls=np.concatenate(classes) if classes else np.zeros(0, dtype=object))
    )
    if joined.empty:
        raise InputError(f"no GPU sample in the store falls inside a task of {source}")
    for cls, rows in joined.groupby("cls", sort=True):
        name = str(cls)
        out.power[name] = rows["power_w"].astype(float).tolist() if "power_w" in rows else []
        out.util[name] = (rows["gpu_util_pct"].astype(float).tolist()
                          if "gpu_util_pct" in rows else [])  # fmt: skip
        out.board[name] = _board_w(name, rows)
    return out


def _key(frame: pd.DataFrame, on: Sequence[str]) -> np.ndarray:
    """One string per row naming its GPU (``hostname/gpu`` or the UUID)."""
    if list(on) == ["uuid"]:
        return frame["uuid"].astype(str).to_numpy()
    return (frame["hostname"].astype(str) + "/" + frame["gpu"].astype(int).astype(str)).to_numpy()


def _board_w(cls: str, rows: pd.DataFrame) -> float:
    by_model = [BOARD_POWER_W.get(canonical_model(str(m) or "x")) for m in rows["model"].unique()]
    known = [w for w in by_model if w is not None]
    if known:
        return float(np.median(known))
    limits = rows["power_limit_w"].dropna() if "power_limit_w" in rows else pd.Series(dtype=float)
    if not limits.empty:
        return float(limits.max())
    models = ", ".join(sorted({str(m) for m in rows["model"].unique()}))
    raise InputError(f"{cls}: the board power of {models} is unknown and the store holds no "
                     "power limit for its GPUs")  # fmt: skip


def render(rows: Iterable[PowerAdvice]) -> str:
    """The advice as the Markdown table ``gpuwarden energy advise`` prints."""
    lines = [
        "| class | samples | mean W | mean util % | board W | cap W | clock cut | power saved | "
        "slowdown | why |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for a in rows:
        cap = "-" if a.cap_w is None else f"{a.cap_w:.0f}"
        lines.append(f"| {a.job_class} | {a.gpus} | {a.mean_power_w:.0f} | {a.mean_util_pct:.0f} | "
                     f"{a.board_w:.0f} | {cap} | {a.clock_cut_pct:.0f}% | "
                     f"{a.power_saved_pct:.0f}% | {a.slowdown_pct:.0f}% | {a.why} |")  # fmt: skip
    return "\n".join(lines)


def _iso(ts: float) -> str:
    return pd.Timestamp(ts, unit="s", tz="UTC").strftime("%Y-%m-%d %H:%M UTC")


__all__ = ["ClassSamples", "classify", "from_store", "read_csv", "render", "scheduler_intervals"]
