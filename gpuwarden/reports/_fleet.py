"""Fleet facts from the store: inventory, availability, failures and their lead time, risk now,
verdict transitions, Xids and hard signals.

Everything reads the store's hourly rollup (``read_window`` at 3600 s) and the stored verdicts,
never a model: the report says what gpuwarden decided, as ``serve`` decided it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd

from gpuwarden.health import GpuState, at_risk_threshold, describe, event_signal
from gpuwarden.reports.model import (
    AtRiskGpu,
    Availability,
    EccCount,
    FailureFact,
    Failures,
    GpuRef,
    Inventory,
    MemoryErrors,
    ModelAvailability,
    NodeAvailability,
    Replacement,
    Risk,
    XidCount,
    Xids,
)

HOUR_S = 3600.0
#: A GPU that has not reported for this long before the period's end is missing.
STALE_S = 2 * HOUR_S
#: How far before a failure a flag still counts as gpuwarden having seen it coming.
LOOKBACK_S = 14 * 86400.0
#: A missed failure whose risk reached this share of the line it was decided at came near it.
NEAR_LINE = 0.5
UNHEALTHY = str(GpuState.UNHEALTHY)
AT_RISK = str(GpuState.AT_RISK)
OK = str(GpuState.OK)


def day(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def in_period(gpus: pd.DataFrame, since: float, until: float) -> pd.DataFrame:
    """The GPUs that reported at some time in ``[since, until)``."""
    return gpus[(gpus["first_ts"] < until) & (gpus["last_ts"] >= since)]


def expected(gpus: pd.DataFrame, since: float, until: float) -> pd.DataFrame:
    """The boards whose slots the period should have had up: those that reported in it, and
    those that went silent less than ``LOOKBACK_S`` before it (a dead GPU awaiting its
    replacement is downtime, a node retired long ago is not)."""
    return gpus[(gpus["first_ts"] < until) & (gpus["last_ts"] >= since - LOOKBACK_S)]


def inventory(gpus: pd.DataFrame, since: float, until: float) -> Inventory:
    """GPUs present, added (a new slot), replaced (a new board in a known slot), missing."""
    seen = in_period(gpus, since, until).sort_values("first_ts")
    boards = gpus.sort_values(["hostname", "gpu", "first_ts"]).reset_index(drop=True)
    slot = boards.groupby(["hostname", "gpu"], sort=False)
    boards["prev_uuid"] = slot["uuid"].shift()
    boards["boards"] = slot["uuid"].transform("size")
    boards["last"] = slot.cumcount() == boards["boards"] - 1
    new = (boards["first_ts"] >= since) & (boards["first_ts"] < until)
    replaced = [
        Replacement(hostname=str(r.hostname), gpu=int(r.gpu), old_uuid=str(r.prev_uuid),
                    new_uuid=str(r.uuid), model=str(r.model), date=day(float(r.first_ts)))
        for r in boards[new & boards["prev_uuid"].notna()].itertuples()
    ]  # fmt: skip
    added = [
        _ref(r, day(float(r["first_ts"])))
        for r in boards[new & (boards["boards"] == 1)].to_dict("records")
    ]
    silent = (boards["last_ts"] >= since - LOOKBACK_S) & (boards["last_ts"] < until - STALE_S)
    missing = [
        _ref(r, day(float(r["last_ts"])))
        for r in boards[boards["last"] & silent].to_dict("records")
    ]
    now = seen.drop_duplicates(["hostname", "gpu"], keep="last")
    return Inventory(
        gpus=len(now),
        nodes=int(now["hostname"].nunique()),
        gpus_by_model={str(k): int(v) for k, v in now["model"].value_counts().sort_index().items()},
        slots={
            str(h): sorted(int(i) for i in g["gpu"])
            for h, g in expected(gpus, since, until)
            .drop_duplicates(["hostname", "gpu"])
            .groupby("hostname")
        },
        added=added,
        replaced=replaced,
        missing=missing,
    )


def _ref(row: dict, date: str | None = None) -> GpuRef:
    return GpuRef(
        hostname=str(row["hostname"]), gpu=int(row["gpu"]), uuid=str(row["uuid"]),
        model=str(row["model"]), date=date,
    )  # fmt: skip


def states_at(verdicts: pd.DataFrame, frame: pd.DataFrame) -> pd.Series:
    """Each row's GPU state (``frame``: uuid, ts) from the newest verdict at or before it;
    "" where the GPU has none."""
    if verdicts.empty or frame.empty:
        return pd.Series("", index=frame.index)
    left = frame[["uuid", "ts"]].astype({"uuid": str}).assign(_row=np.arange(len(frame)))
    left = left.sort_values("ts")
    right = verdicts[["uuid", "ts", "state"]].astype({"uuid": str}).sort_values("ts")
    merged = pd.merge_asof(left, right, on="ts", by="uuid", direction="backward")
    out = pd.Series("", index=frame.index, dtype=object)
    out.iloc[merged["_row"].to_numpy()] = merged["state"].fillna("").to_numpy()
    return out


def availability(
    gpus: pd.DataFrame, hourly: pd.DataFrame, verdicts: pd.DataFrame, since: float, until: float
) -> Availability | None:
    """Up GPU-hours over expected GPU-hours, per node, per model and for the fleet."""
    seen = expected(gpus, since, until)
    if seen.empty:
        return None
    # a slot is expected from when its first board appeared (or the period's start)
    slots = seen.groupby(["hostname", "gpu"]).agg(
        first_ts=("first_ts", "min"), model=("model", "last")
    )
    expected_h = (until - slots["first_ts"].clip(lower=since)) / HOUR_S
    up = hourly[["hostname", "gpu", "uuid", "ts"]].copy()
    up["ts"] = up["ts"] + HOUR_S / 2  # the state in the middle of the hour
    up = up[states_at(verdicts, up) != UNHEALTHY]
    up["hour"] = ((up["ts"] - since) // HOUR_S).astype(np.int64)
    up_h = up.drop_duplicates(["hostname", "gpu", "hour"]).groupby(["hostname", "gpu"]).size()
    table = pd.DataFrame({"expected_h": expected_h, "model": slots["model"]})
    table["up_h"] = up_h.reindex(table.index).fillna(0.0).clip(upper=table["expected_h"])
    table = table.reset_index()

    def rollup(by: str) -> pd.DataFrame:
        g = table.groupby(by).agg(
            gpus=("gpu", "size"), expected=("expected_h", "sum"), up=("up_h", "sum")
        )
        g["pct"] = 100.0 * g["up"] / g["expected"]
        g["down"] = g["expected"] - g["up"]
        return g

    nodes, models = rollup("hostname"), rollup("model")
    total_h, up_total = float(table["expected_h"].sum()), float(table["up_h"].sum())
    return Availability(
        fleet_availability_pct=round(100.0 * up_total / total_h, 2) if total_h else 0.0,
        fleet_downtime_h=round(total_h - up_total, 1),
        by_node=[
            NodeAvailability(hostname=str(h), gpus=int(r.gpus), availability_pct=round(r.pct, 2),
                             downtime_h=round(r.down, 1))
            for h, r in nodes.iterrows()
        ],
        by_model=[
            ModelAvailability(model=str(m), gpus=int(r.gpus), availability_pct=round(r.pct, 2),
                              downtime_h=round(r.down, 1))
            for m, r in models.iterrows()
        ],
    )  # fmt: skip


def failures(failed: pd.DataFrame, verdicts: pd.DataFrame, models: dict[str, str]) -> Failures:
    """Each failure, and how long before it gpuwarden's verdict first left ok (the start of the
    flag that was still standing when it failed). A failure with no flag before it was missed;
    one with no verdict at all in the ``LOOKBACK_S`` before it was not watched (gpuwarden was not
    running, or verdicts were backfilled for later days only), neither caught nor missed."""
    items: list[FailureFact] = []
    near: list[bool] = []  # missed, with a risk near the line
    by_uuid = {u: v.sort_values("ts") for u, v in verdicts.groupby("uuid")} if len(verdicts) else {}
    for f in failed.sort_values("ts").itertuples():
        ts = float(f.ts)
        v = by_uuid.get(f.uuid)
        flag_ts, cause, watched, peak, line = None, None, False, None, None
        if v is not None:
            before = v[(v["ts"] < ts) & (v["ts"] >= ts - LOOKBACK_S)]
            watched = len(before) > 0
            peak, line = _peak_and_line(before)
            oks = before[before["state"] == OK]
            after_ok = before[before["ts"] > oks["ts"].max()] if len(oks) else before
            flagged = after_ok[after_ok["state"] != OK]
            if len(flagged):
                flag_ts, cause = float(flagged["ts"].iloc[0]), str(flagged["cause"].iloc[0])
        xid = getattr(f, "xid", None)
        items.append(
            FailureFact(
                hostname=str(f.hostname), gpu=int(f.gpu), uuid=str(f.uuid),
                model=models.get(str(f.uuid), ""), date=day(ts), kind=str(f.kind),
                xid=None if _nan(xid) else int(xid),  # type: ignore[arg-type]
                caught=flag_ts is not None,
                flagged_date=day(flag_ts) if flag_ts is not None else None,
                lead_time_h=round((ts - flag_ts) / HOUR_S, 1) if flag_ts is not None else None,
                flag_cause=cause, watched=watched, peak_risk=peak,
            )
        )  # fmt: skip
        line = at_risk_threshold() if line is None else line
        near.append(flag_ts is None and watched and peak is not None and peak >= NEAR_LINE * line)
    leads = [i.lead_time_h for i in items if i.lead_time_h is not None]
    caught = sum(i.caught for i in items)
    unwatched = sum(not i.watched for i in items)
    return Failures(
        failures=len(items),
        caught=caught,
        missed=len(items) - caught - unwatched,
        unwatched=unwatched,
        missed_near=sum(near),
        median_lead_time_h=round(float(np.median(leads)), 1) if leads else None,
        items=items,
    )


def _peak_and_line(before: pd.DataFrame) -> tuple[float | None, float | None]:
    """The highest known risk of a GPU's verdicts before it failed, and the newest line they
    were decided at (None where the verdicts do not say)."""
    risk = before["risk"].dropna() if "risk" in before else pd.Series(dtype=float)
    line = before["threshold"].dropna() if "threshold" in before else pd.Series(dtype=float)
    return (
        round(float(risk.max()), 3) if len(risk) else None,
        float(line.iloc[-1]) if len(line) else None,
    )


def _nan(x: object) -> bool:
    """Missing: None, NaN or pandas' NA."""
    return x is None or (not isinstance(x, str | tuple | list) and bool(pd.isna(x)))


def risk(
    latest: pd.DataFrame,
    verdicts: pd.DataFrame,
    gpus: pd.DataFrame,
    since: float,
    until: float,
) -> Risk:
    """GPUs whose newest verdict is not ok (boards since replaced left out), and per day how
    many GPUs ended the day at-risk or unhealthy."""
    current = gpus.sort_values("first_ts").drop_duplicates(["hostname", "gpu"], keep="last")
    live = set(current["uuid"])
    models = dict(zip(gpus["uuid"], gpus["model"], strict=False))
    flagged = latest[(latest["state"] != OK) & latest["uuid"].isin(live)]
    flagged = flagged.sort_values(["state", "risk"], ascending=[False, False])
    items = [
        AtRiskGpu(
            hostname=str(r.hostname), gpu=int(r.gpu), uuid=str(r.uuid),
            model=str(models.get(r.uuid, "")), state=str(r.state),
            risk=None if _nan(r.risk) else round(float(r.risk), 3),
            since_date=None if r.since is None or _nan(r.since) else day(float(r.since)),
            reasons=[str(x) for x in (r.reasons or ())], action=str(r.action),
        )
        for r in flagged.itertuples()
    ]  # fmt: skip
    daily: list[tuple[str, int, int]] = []
    if len(verdicts):
        # each GPU's state at the end of each day: its newest verdict by then, carried forward
        present = set(expected(gpus, since, until)["uuid"].astype(str))
        uuids = [u for u in verdicts["uuid"].astype(str).unique() if u in present]
        ends = np.arange(since + 86400.0, until + 1.0, 86400.0) - 1.0
        grid = pd.DataFrame({"uuid": np.repeat(uuids, len(ends)), "ts": np.tile(ends, len(uuids))})
        grid["state"] = states_at(verdicts, grid).to_numpy()
        for end, g in grid.groupby("ts"):
            daily.append((day(float(end)), int((g["state"] == AT_RISK).sum()),
                          int((g["state"] == UNHEALTHY).sum())))  # fmt: skip
    return Risk(
        at_risk_gpus=sum(i.state == AT_RISK for i in items),
        unhealthy_gpus=sum(i.state == UNHEALTHY for i in items),
        gpus=items,
        daily=daily,
    )


def memory_errors(events: pd.DataFrame) -> MemoryErrors | None:
    """The period's per-address HBM errors by ECC type; None when there are none."""
    from gpuwarden.collectors.memory_errors import KIND, by_ecc_type

    counts = by_ecc_type(events)
    if not counts:
        return None
    mem = events[events["kind"] == KIND]
    by_type = [EccCount(ecc=k, errors=n, devices=d) for k, (n, d) in counts.items()]
    return MemoryErrors(
        errors=len(mem),
        uncorrectable=sum(c.errors for c in by_type if c.ecc.startswith("UE")),
        devices=int(mem["uuid"].nunique()),
        by_type=by_type,
    )


def xids(events: pd.DataFrame) -> Xids:
    """Xids by code and class (the Xid table in force), and the hard signals among the events."""
    hard: dict[str, int] = {}
    for kind, code, detail in zip(events["kind"], events["code"], events["detail"], strict=False):
        signal = event_signal(str(kind), None if _nan(code) else code, str(detail or ""))
        if signal is not None:
            hard[signal.name] = hard.get(signal.name, 0) + 1
    x = events[(events["kind"] == "xid") & events["code"].notna()]
    by_code: list[XidCount] = []
    by_class: dict[str, int] = {}
    for code, g in x.groupby(x["code"].astype(int)):
        entry = describe(int(code))
        by_code.append(
            XidCount(code=int(code), name=entry.name, xid_class=entry.cls, count=len(g),
                     gpus=int(g["uuid"].nunique()), action=entry.action)
        )  # fmt: skip
        by_class[entry.cls] = by_class.get(entry.cls, 0) + len(g)
    by_code.sort(key=lambda c: (-c.count, c.code))
    return Xids(xids=len(x), by_code=by_code, by_class=by_class, hard_signals=hard)
