"""Per-GPU risk features at a scoring time, over 1 h, 6 h, 24 h and 7 d windows.

    meta, X = compute_features(panel, rows_at(panel, [t]))

Every feature is vectorised over all (time, GPU) rows at once. Rates come from reset-aware
hourly increases, so a driver reload never produces a negative or a spurious rate; a signal
the GPU does not report (memory temperature on some boards, retired pages on Ampere and later)
stays NaN, which the model treats as "unknown", never as zero. ``FEATURES`` lists each feature
with its unit and where it comes from (DCGM field names in ``docs/models.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpuwarden.models._windows import Windows, log_rise
from gpuwarden.models.panel import HOUR_S, INCREASES, HourlyPanel

H1, H6, H24, H72, D7 = 1, 6, 24, 72, 168
#: Days before the last one searched for the GPU's quietest day, and how many must be read.
QUIET_DAYS, QUIET_MIN_DAYS = 13, 6
#: Hours of history before a scoring hour the features read (the quietest day's search, and
#: the hour before it for the first increase): what scoring has to load. Every feature but the
#: quietest day's reads only the last ``RECENT_H`` of them; before that, scoring reads only
#: ``LONG_FIELDS`` (below): 4 s of store read for 10,000 GPUs' older week, not 10.5 s.
HISTORY_H = 24 * (QUIET_DAYS + 1) + 2
RECENT_H = D7 + 2
#: DCGM's PCIe replay limit per lane per minute by link generation (Gen3 0.48 ... Gen5 1.92);
#: Gen1/Gen2 halve again. The allowed rate is this times the link's lanes.
PCIE_REPLAY_LIMIT_PER_LANE_MIN: dict[int, float] = {1: 0.12, 2: 0.24, 3: 0.48, 4: 0.96, 5: 1.92}
SPREAD_LIMIT_C = 15.0


@dataclass(frozen=True)
class Feature:
    name: str
    group: str  # memory, thermal, pcie, nvlink, xid, telemetry: its reasons sentence; context: none
    unit: str
    help: str


def _f(name: str, group: str, unit: str, help: str) -> Feature:
    return Feature(name, group, unit, help)


_BASE: tuple[Feature, ...] = (
    _f("sbe_per_day_1h", "memory", "errors/day", "Single-bit ECC errors, last hour, per day."),
    _f("sbe_per_day_6h", "memory", "errors/day", "Single-bit ECC errors, last 6 h, per day."),
    _f("sbe_per_day_24h", "memory", "errors/day", "Single-bit ECC errors, last 24 h."),
    _f("sbe_per_day_7d", "memory", "errors/day", "Single-bit ECC errors, last 7 days, per day."),
    _f(
        "sbe_fleet_level_7d",
        "context",
        "log errors/day",
        "The fleet's benign single-bit noise: log(1 + sbe_per_day_7d) at its 90th percentile "
        "over the fleet's GPUs at that hour.",
    ),
    _f(
        "sbe_vs_fleet_level_7d",
        "memory",
        "log ratio",
        "log(1 + sbe_per_day_7d) minus the fleet's level (sbe_fleet_level_7d).",
    ),
    _f("sbe_rise_24h", "memory", "log ratio", "SBE rate of the last day vs the 6 days before."),
    _f("sbe_accel_6h", "memory", "log ratio", "SBE rate of the last 6 h vs the last day."),
    _f("sbe_rise_day", "memory", "log ratio", "SBE rate of the last day vs the day before."),
    _f("sbe_rise_3d", "memory", "log ratio", "SBE rate of the last 3 days vs the 4 days before."),
    _f("sbe_trend_24h", "memory", "log/h", "Slope of log(1 + hourly SBEs) over the last day."),
    _f("sbe_trend_3d", "memory", "log/h", "Slope of log(1 + hourly SBEs) over the last 3 days."),
    _f("sbe_active_hours_24h", "memory", "h", "Hours of the last day with any SBE."),
    _f("sbe_active_hours_7d", "memory", "h", "Hours of the last week with any SBE."),
    _f("sbe_peak_share_24h", "memory", "fraction", "Busiest hour's share of the day's SBEs."),
    _f("dbe_24h", "memory", "errors", "Double-bit ECC errors, last 24 h."),
    _f("dbe_7d", "memory", "errors", "Double-bit ECC errors, last 7 days."),
    _f("remap_correctable_24h", "memory", "rows", "Rows remapped for correctable errors, 24 h."),
    _f("remap_correctable_7d", "memory", "rows", "Rows remapped for correctable errors, 7 d."),
    _f("remap_uncorrectable_7d", "memory", "rows", "Rows remapped for uncorrectable errors, 7 d."),
    _f("remap_pending_1h", "memory", "bool", "A row remap waits for a GPU reset (last hour)."),
    _f("remap_failure_24h", "memory", "bool", "A row remap failed in the last 24 h."),
    _f("retired_pages_7d", "memory", "pages", "Pages retired in the last 7 days (pre-Ampere)."),
    _f("retired_pages_total", "memory", "pages", "Pages retired over the board's life."),
    _f("retired_pending_1h", "memory", "bool", "A page retirement waits for a reset."),
    _f("xid63_7d", "memory", "events", "Xid 63 (row remap / page retirement) in 7 days."),
    _f("xid92_7d", "memory", "events", "Xid 92 (high SBE rate) in 7 days."),
    _f("mem_temp_c_1h", "thermal", "C", "HBM temperature, mean of the last hour."),
    _f("mem_temp_c_24h", "thermal", "C", "HBM temperature, mean of the last day."),
    _f("mem_temp_max_c_24h", "thermal", "C", "HBM temperature, hottest hour's peak, last day."),
    _f("mem_temp_std_c_24h", "thermal", "C", "Spread of hourly HBM temperatures, last day."),
    _f("mem_temp_rise_c", "thermal", "C", "HBM temperature, last day minus the 6 days before."),
    _f("gpu_temp_c_24h", "thermal", "C", "Core temperature, mean of the last day."),
    _f("spread_c_1h", "thermal", "C", "HBM minus core temperature, last hour."),
    _f("spread_c_24h", "thermal", "C", "HBM minus core temperature, last day."),
    _f("spread_rise_c", "thermal", "C", "HBM-core spread, last day minus the 6 days before."),
    _f(
        "spread_rise_vs_fleet",
        "thermal",
        "ratio",
        "Spread rise against the fleet's at that hour: minus the median, over the p95 deviation.",
    ),
    _f(
        "hbm_load_rise_vs_fleet",
        "thermal",
        "ratio",
        "HBM temperature at the same power, last day against the GPU's fit over the 6 days "
        "before, against the fleet's at that hour (as spread_rise_vs_fleet).",
    ),
    _f(
        "core_load_rise_vs_fleet",
        "thermal",
        "ratio",
        "The same for the core temperature (boards that do not report HBM temperature).",
    ),
    _f("spread_trend_24h", "thermal", "C/h", "Slope of the HBM-core spread over the last day."),
    _f("spread_hours_over15_24h", "thermal", "h", "Hours of the last day with spread > 15 C."),
    _f("spread_hours_over15_7d", "thermal", "h", "Hours of the last week with spread > 15 C."),
    _f("thermal_violation_pct_24h", "thermal", "%", "Time clocks were held by thermal limits."),
    _f("hw_slowdown_hours_24h", "thermal", "h", "Hours with a hardware slowdown, last day."),
    _f("power_w_24h", "thermal", "W", "Board power, mean of the last day (load context)."),
    _f("gpu_util_pct_24h", "thermal", "%", "GPU utilisation, mean of the last day."),
    _f("pcie_replay_per_min_1h", "pcie", "replays/min", "PCIe replays per minute, last hour."),
    _f("pcie_replay_per_min_24h", "pcie", "replays/min", "PCIe replays per minute, last day."),
    _f("pcie_replay_per_min_7d", "pcie", "replays/min", "PCIe replays per minute, last week."),
    _f(
        "pcie_fleet_level_7d",
        "context",
        "log replays/day",
        "The fleet's benign PCIe noise: log(1 + replays a day over the last week) at its 90th "
        "percentile over the fleet's GPUs at that hour.",
    ),
    _f(
        "pcie_vs_fleet_level_7d",
        "pcie",
        "log ratio",
        "log(1 + replays a day over the last week) minus the fleet's level.",
    ),
    _f("pcie_replay_vs_limit_1h", "pcie", "ratio", "Last hour's replay rate / DCGM's limit."),
    _f("pcie_replay_rise_24h", "pcie", "log ratio", "Replay rate, last day vs 6 days before."),
    _f("pcie_replay_trend_24h", "pcie", "log/h", "Slope of log(1 + hourly replays), last day."),
    _f("pcie_replay_active_hours_24h", "pcie", "h", "Hours of the last day with replays."),
    _f("pcie_replay_active_hours_7d", "pcie", "h", "Hours of the last week with replays."),
    _f("pcie_replay_accel_6h", "pcie", "log ratio", "Replay rate, last 6 h vs the last day."),
    _f(
        "pcie_replay_peak_share_24h",
        "pcie",
        "fraction",
        "Busiest hour's share of the day's replays.",
    ),
    _f("pcie_width_deficit_1h", "pcie", "fraction", "Lanes missing from the link, last hour."),
    _f("pcie_width_low_hours_24h", "pcie", "h", "Hours of the last day below full width."),
    _f("nvlink_crc_per_min_1h", "nvlink", "errors/min", "NVLink CRC errors/min, last hour."),
    _f("nvlink_crc_per_min_24h", "nvlink", "errors/min", "NVLink CRC errors/min, last day."),
    _f("nvlink_crc_per_min_7d", "nvlink", "errors/min", "NVLink CRC errors/min, last week."),
    _f("nvlink_crc_rise_24h", "nvlink", "log ratio", "NVLink CRC rate, day vs 6 days before."),
    _f("nvlink_crc_trend_24h", "nvlink", "log/h", "Slope of log(1 + hourly CRC errors), day."),
    _f("nvlink_replay_per_min_24h", "nvlink", "errors/min", "NVLink replays/min, last day."),
    _f("nvlink_recovery_24h", "nvlink", "events", "NVLink link recoveries, last day."),
    _f("nvlink_active_hours_24h", "nvlink", "h", "Hours of the last day with CRC errors."),
    _f("nvlink_crc_accel_6h", "nvlink", "log ratio", "NVLink CRC rate, last 6 h vs the last day."),
    _f(
        "nvlink_crc_peak_share_24h", "nvlink", "fraction", "Busiest hour's share of the day's CRCs."
    ),
    _f("xid74_7d", "nvlink", "events", "Xid 74 (NVLink error) in 7 days."),
    _f("xid_hw_24h", "xid", "events", "Hardware-class Xids, last day."),
    _f("xid_hw_7d", "xid", "events", "Hardware-class Xids, last week."),
    _f("xid_app_24h", "xid", "events", "Application-class Xids, last day (job faults)."),
    _f("xid_app_7d", "xid", "events", "Application-class Xids, last week."),
    _f("xid_fatal_24h", "xid", "events", "Fatal Xids (48, 62, 64, 74, 79, 94, 95, 119, 120)."),
    _f("gpu_lost_24h", "xid", "events", "GPU fell off the bus or needed a reset, last day."),
    # not a reason: tells the trees when the windows above are short (a new board)
    _f("history_h", "context", "h", "Hours of this GPU life's history, up to 168."),
    # silence (issue 14): hours the GPU sent nothing while its life went on; never zeros
    _f("gap_hours_24h", "telemetry", "h", "Hours of the last day without a sample."),
    _f("gap_hours_7d", "telemetry", "h", "Hours of the last week without a sample."),
    _f("longest_gap_h_7d", "telemetry", "h", "Longest run of hours without a sample, 7 days."),
    _f("pcie_width_low_run_h", "pcie", "h", "Hours in a row, up to now, below full link width."),
)
#: Error counters read against the GPU's own past and its peers instead of in absolute
#: units: another generator's (or another fleet's) replay and CRC magnitudes differ from the
#: simulator's by orders, so what carries over is "worse than itself and its neighbours".
#: (hourly increase in the panel, feature prefix, reason group, what it counts)
RELATIVE: tuple[tuple[str, str, str, str], ...] = (
    ("sbe", "sbe", "memory", "single-bit errors"),
    ("replay", "pcie_replay", "pcie", "PCIe replays"),
    ("nvl_crc", "nvlink_crc", "nvlink", "NVLink CRC errors"),
)
#: The counters behind ``RELATIVE``: all the quietest day reads before the last ``RECENT_H``.
LONG_FIELDS: tuple[str, ...] = tuple(f for key, *_ in RELATIVE for f in INCREASES[key][0])
_REL_HELP: tuple[tuple[str, str, str], ...] = (
    ("log_vs_own", "log ratio", "log(1 + hourly {w}, last day) minus the same, 6 days before."),
    ("peak_vs_own", "log ratio", "log(1 + busiest hour's {w}, last day) vs the 6 days before."),
    (
        "vs_quietest_14d",
        "log ratio",
        "log(1 + hourly {w}, last day) minus the same on its quietest day of the 13 before.",
    ),
    ("new_24h", "bool", "{W} in the last day after 6 days without any (NaN: no baseline)."),
    ("growth_72h", "log/h", "Slope of log(1 + hourly {w}) over 3 days: exponential growth."),
    ("active_share_72h", "fraction", "Share of the last 3 days' hours with any {w}."),
    ("node_rank_24h", "fraction", "Share of the node's other GPUs with fewer {w} today."),
    ("vs_node_log_24h", "log ratio", "log(1 + hourly {w}) today over the node median's, >= 0."),
    ("model_rank_24h", "fraction", "Share of same-model GPUs in the fleet with fewer {w}."),
    ("anomaly", "signs", "Scale-free warning signs of {w} at once (0-5): see docs/models.md."),
)
_BASE = _BASE + tuple(
    _f(
        f"{prefix}_{suffix}",
        group,
        unit,
        help.format(w=what, W=what[0].upper() + what[1:]),
    )
    for _, prefix, group, what in RELATIVE
    for suffix, unit, help in _REL_HELP
)
#: Signals also compared with the GPU's node and rack: value minus the peers' median, so a
#: rack-wide heat wave or a node-wide job crash is not one sick GPU.
PEER_SIGNALS: tuple[str, ...] = (
    "mem_temp_c_1h",
    "mem_temp_c_24h",
    "gpu_temp_c_24h",
    "spread_c_24h",
    "thermal_violation_pct_24h",
    "sbe_per_day_24h",
    "pcie_replay_per_min_24h",
    "nvlink_crc_per_min_24h",
    "xid_app_24h",
)
_GROUP = {f.name: f for f in _BASE}
FEATURES: tuple[Feature, ...] = _BASE + tuple(
    _f(
        f"{s}_vs_{scope}",
        _GROUP[s].group,
        _GROUP[s].unit,
        f"{_GROUP[s].help.rstrip('.')}, minus the median of the GPU's {scope}.",
    )
    for s in PEER_SIGNALS
    for scope in ("node", "rack")
)
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
FEATURES_BY_NAME = {f.name: f for f in FEATURES}
#: Features in the simulator's own units of error counts: rates per day or minute, and their
#: differences from the node and rack medians. Another generator's (or fleet's) replay, CRC and
#: SBE magnitudes differ by orders, so a model that may read these learns ours (issue 17);
#: ``TrainOptions.exclude_features`` keeps them out of the trees (they stay in ``X`` for the
#: reasons and the rules).
ABSOLUTE_FEATURES: tuple[str, ...] = tuple(
    n
    for n in FEATURE_NAMES
    if FEATURES_BY_NAME[n].unit in ("errors/day", "replays/min", "errors/min")
    or n == "pcie_replay_vs_limit_1h"
)
#: Features in which more can only mean more evidence of a fault, on any fleet: counts of hard
#: events (uncorrectable errors, remaps, retired pages, hardware and fatal Xids, lost buses,
#: link recoveries, hardware slowdowns), lanes lost, and comparisons of the GPU with its own
#: past, its peers and the fleet's level (scale-free). ``TrainOptions.monotone`` holds the
#: trees' score non-decreasing in each, so a fleet whose magnitudes lie past or between the
#: training fleets' cannot meet a learnt dip. Left free: magnitudes in a generator's own units
#: (rates, temperatures, power, load), the fleet's levels, the shapes of a day (trend,
#: acceleration, peak share), application Xids, history and gaps.
MONOTONE_FEATURES: tuple[str, ...] = tuple(
    n
    for n in FEATURE_NAMES
    if n
    in {
        "dbe_24h",
        "dbe_7d",
        "remap_correctable_24h",
        "remap_correctable_7d",
        "remap_uncorrectable_7d",
        "remap_pending_1h",
        "remap_failure_24h",
        "retired_pages_7d",
        "retired_pages_total",
        "retired_pending_1h",
        "xid63_7d",
        "xid92_7d",
        "xid74_7d",
        "xid_hw_24h",
        "xid_hw_7d",
        "xid_fatal_24h",
        "gpu_lost_24h",
        "nvlink_recovery_24h",
        "hw_slowdown_hours_24h",
        "pcie_width_deficit_1h",
        "pcie_width_low_hours_24h",
        "pcie_width_low_run_h",
        "sbe_vs_fleet_level_7d",
        "pcie_vs_fleet_level_7d",
        "sbe_rise_24h",
        "sbe_rise_day",
        "sbe_rise_3d",
        "pcie_replay_rise_24h",
        "nvlink_crc_rise_24h",
        "mem_temp_rise_c",
        "spread_rise_c",
        "spread_rise_vs_fleet",
        "hbm_load_rise_vs_fleet",
        "core_load_rise_vs_fleet",
    }
    or any(n == f"{prefix}_{suffix}" for _, prefix, _, _ in RELATIVE for suffix, _, _ in _REL_HELP)
    or (n.endswith(("_vs_node", "_vs_rack")) and FEATURES_BY_NAME[n].unit in ("C", "%"))
)
META_COLUMNS = (
    "at",
    "key",
    "uuid",
    "hostname",
    "gpu",
    "model",
    "rack",
    "t",
    "fatal_xid",
    "pcie_width",
    "pcie_width_max",
)


def rows_at(panel: HourlyPanel, t: np.ndarray | list[int], *, recent_h: int = 1) -> np.ndarray:
    """(t, g) rows of the GPU lives that sent a sample in the ``recent_h`` buckets up to ``t``."""
    t = np.asarray(t, dtype=np.int64)
    if t.size == 0 or panel.shape[1] == 0:
        return np.empty((0, 2), dtype=np.int64)
    cum = np.zeros((panel.shape[0] + 1, panel.shape[1]), dtype=np.int32)
    np.cumsum(panel.seen, axis=0, out=cum[1:])
    recent = cum[t + 1] - cum[np.maximum(t + 1 - recent_h, 0)]
    ti, gi = np.nonzero(recent > 0)
    return np.column_stack([t[ti], gi]).astype(np.int64)


def _memory(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    sbe = w.rates(p.inc["sbe"], (H1, H6, H24, D7), 24.0)
    for h, name in ((H1, "1h"), (H6, "6h"), (H24, "24h"), (D7, "7d")):
        out[f"sbe_per_day_{name}"] = sbe[h]
    before = _rate_before(w, p.inc["sbe"], 24.0)
    out["sbe_rise_24h"] = log_rise(sbe[H24], before)
    out["sbe_accel_6h"] = log_rise(sbe[H6], sbe[H24])
    out["sbe_rise_day"] = log_rise(sbe[H24], _rate_between(w, p.inc["sbe"], H24, 2 * H24, 24.0))
    out["sbe_rise_3d"] = log_rise(
        w.rates(p.inc["sbe"], (H72,), 24.0)[H72], _rate_between(w, p.inc["sbe"], H72, D7, 24.0)
    )
    out["sbe_trend_24h"] = w.slope(np.log1p(p.inc["sbe"]), H24)
    out["sbe_trend_3d"] = w.slope(np.log1p(p.inc["sbe"]), H72)
    out["sbe_active_hours_24h"] = w.count_where(p.inc["sbe"], p.inc["sbe"] > 0, H24)
    out["sbe_active_hours_7d"] = w.count_where(p.inc["sbe"], p.inc["sbe"] > 0, D7)
    out["sbe_peak_share_24h"] = _peak_share(w, p.inc["sbe"])
    for name, key, wins in (
        ("dbe", "dbe", (H24, D7)),
        ("remap_correctable", "remap_c", (H24, D7)),
        ("remap_uncorrectable", "remap_u", (D7,)),
        ("retired_pages", "retired", (D7,)),
    ):
        for h, (s, k) in w.sums(p.inc[key], wins).items():
            out[f"{name}_{'24h' if h == H24 else '7d'}"] = np.where(k > 0, s, np.nan)
    out["remap_pending_1h"] = w.last(p.gauge["remapped_rows_pending_max"])
    out["remap_failure_24h"] = w.peak(p.gauge["remapped_rows_failure_max"], H24)
    out["retired_pages_total"] = w.last(p.retired_total)
    out["retired_pending_1h"] = w.last(p.gauge["retired_pages_pending_max"])
    out["xid63_7d"] = w.sums(p.events["xid63"], (D7,))[D7][0]
    out["xid92_7d"] = w.sums(p.events["xid92"], (D7,))[D7][0]


def _rate_between(w: Windows, a: np.ndarray, near: int, far: int, per_h: float) -> np.ndarray:
    """Rate over the buckets ``near..far`` hours back (NaN without that history)."""
    sums = w.sums(a, (near, far))
    s = sums[far][0] - sums[near][0]
    k = sums[far][1] - sums[near][1]
    h = w.hours(far) - w.hours(near)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((k > 0) & (h > 0), s / h * per_h, np.nan)


def _rate_before(w: Windows, a: np.ndarray, per_h: float) -> np.ndarray:
    """Rate over the 6 days before the last day (NaN without that history)."""
    return _rate_between(w, a, H24, D7, per_h)


def _mean_before(w: Windows, a: np.ndarray) -> np.ndarray:
    sums = w.sums(a, (H24, D7))
    s = sums[D7][0] - sums[H24][0]
    k = sums[D7][1] - sums[H24][1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, s / k, np.nan)


def _peak_share(w: Windows, a: np.ndarray) -> np.ndarray:
    """The busiest hour's share of the last day's count: near 1 for one burst, low when steady
    (NaN on a day without any)."""
    day_total = w.sums(a, (H24,))[H24][0]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = w.peak(a, H24) / day_total
    return np.where(day_total > 0, share, np.nan)


def _thermal(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    mem, spread = p.gauge["mem_temp_c"], p.gauge["spread_c"]
    m = w.means(mem, (H1, H24))
    out["mem_temp_c_1h"], out["mem_temp_c_24h"] = m[H1], m[H24]
    out["mem_temp_max_c_24h"] = w.peak(p.gauge["mem_temp_c_max"], H24)
    out["mem_temp_std_c_24h"] = w.std(mem, H24)
    out["mem_temp_rise_c"] = m[H24] - _mean_before(w, mem)
    out["gpu_temp_c_24h"] = w.means(p.gauge["gpu_temp_c"], (H24,))[H24]
    s = w.means(spread, (H1, H24))
    out["spread_c_1h"], out["spread_c_24h"] = s[H1], s[H24]
    out["spread_rise_c"] = s[H24] - _mean_before(w, spread)
    out["spread_trend_24h"] = w.slope(spread, H24)
    over = spread > SPREAD_LIMIT_C
    out["spread_hours_over15_24h"] = w.count_where(spread, over, H24)
    out["spread_hours_over15_7d"] = w.count_where(spread, over, D7)
    # thermal_violation_us per hour of wall time, as a percentage
    out["thermal_violation_pct_24h"] = w.rates(p.inc["thermal_us"], (H24,), 1.0)[H24] / 36e6 * 100
    out["hw_slowdown_hours_24h"] = w.count_where(
        p.gauge["hw_slowdown"], p.gauge["hw_slowdown"] > 0, H24
    )
    out["power_w_24h"] = w.means(p.gauge["power_w"], (H24,))[H24]
    out["gpu_util_pct_24h"] = w.means(p.gauge["gpu_util_pct"], (H24,))[H24]
    out.update(_load_rises(p, w))


def _load_rises(p: HourlyPanel, w: Windows) -> dict[str, np.ndarray]:
    """HBM and core temperature at the same power, last day against the 6 before."""
    power = p.gauge["power_w"]
    return {
        "_hbm_load_rise": _load_rise(w, p.gauge["mem_temp_c"], power),
        "_core_load_rise": _load_rise(w, p.gauge["gpu_temp_c"], power),
    }


#: hours of the 6 days before the last day a temperature-on-power fit needs
LOAD_FIT_MIN_H = 48


def _load_rise(w: Windows, temp: np.ndarray, power: np.ndarray) -> np.ndarray:
    """The last day's mean temperature above what the GPU's own fit of temperature on power
    over the 6 days before gives at the last day's power: a failing cold plate runs hotter at
    the same load; a new job at a new load does not count (NaN under ``LOAD_FIT_MIN_H`` hours
    of pairs before, or without the last day's)."""
    both = ~np.isnan(temp) & ~np.isnan(power)
    y = np.where(both, temp, np.nan).astype(np.float64)
    x = np.where(both, power, np.nan).astype(np.float64)

    def before_and_last(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        sums = w.sums(a, (H24, D7))
        return sums[D7][0] - sums[H24][0], sums[D7][1] - sums[H24][1], sums[H24][0], sums[H24][1]

    sx, n, sx_last, n_last = before_and_last(x)
    sy, _, sy_last, _ = before_and_last(y)
    sxy, _, _, _ = before_and_last(x * y)
    sxx, _, _, _ = before_and_last(x * x)
    with np.errstate(invalid="ignore", divide="ignore"):
        xm, ym = sx / n, sy / n
        var = sxx / n - xm * xm
        slope = np.where(var > 1e-6, (sxy / n - xm * ym) / var, 0.0)
        expected = ym + slope * (sx_last / n_last - xm)
        rise = sy_last / n_last - expected
    return np.where((n >= LOAD_FIT_MIN_H) & (n_last > 0), rise, np.nan)


def _pcie(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    r = w.rates(p.inc["replay"], (H1, H6, H24, D7), 1 / 60)
    out["pcie_replay_per_min_1h"], out["pcie_replay_per_min_24h"] = r[H1], r[H24]
    out["pcie_replay_per_min_7d"] = r[D7]
    gen = np.rint(w.last(p.gauge["pcie_link_gen_max"]))
    per_lane = np.full(gen.shape, np.nan)
    for g, lim in PCIE_REPLAY_LIMIT_PER_LANE_MIN.items():
        per_lane[gen == g] = lim
    per_lane[gen > 5] = PCIE_REPLAY_LIMIT_PER_LANE_MIN[5]
    lanes = w.last(p.gauge["pcie_link_width_max"])
    out["pcie_replay_vs_limit_1h"] = r[H1] / (per_lane * lanes)
    out["pcie_replay_rise_24h"] = log_rise(r[H24], _rate_before(w, p.inc["replay"], 1 / 60))
    out["pcie_replay_trend_24h"] = w.slope(np.log1p(p.inc["replay"]), H24)
    out["pcie_replay_active_hours_24h"] = w.count_where(p.inc["replay"], p.inc["replay"] > 0, H24)
    out["pcie_replay_active_hours_7d"] = w.count_where(p.inc["replay"], p.inc["replay"] > 0, D7)
    # a burst that has passed (accel < 0, one busy hour) against a steady climb; the share
    # is scale-free, the acceleration (rates per minute, as the rise) only near it
    out["pcie_replay_accel_6h"] = log_rise(r[H6], r[H24])
    out["pcie_replay_peak_share_24h"] = _peak_share(w, p.inc["replay"])
    width, wmax = p.gauge["pcie_link_width"], p.gauge["pcie_link_width_max"]
    out["pcie_width_deficit_1h"] = 1.0 - w.last(width) / w.last(wmax)
    out["pcie_width_low_hours_24h"] = w.count_where(width, width < wmax - 0.5, H24)


def _nvlink(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    r = w.rates(p.inc["nvl_crc"], (H1, H6, H24, D7), 1 / 60)
    out["nvlink_crc_per_min_1h"], out["nvlink_crc_per_min_24h"] = r[H1], r[H24]
    out["nvlink_crc_per_min_7d"] = r[D7]
    out["nvlink_crc_rise_24h"] = log_rise(r[H24], _rate_before(w, p.inc["nvl_crc"], 1 / 60))
    out["nvlink_crc_trend_24h"] = w.slope(np.log1p(p.inc["nvl_crc"]), H24)
    out["nvlink_replay_per_min_24h"] = w.rates(p.inc["nvl_replay"], (H24,), 1 / 60)[H24]
    s, k = w.sums(p.inc["nvl_recovery"], (H24,))[H24]
    out["nvlink_recovery_24h"] = np.where(k > 0, s, np.nan)
    out["nvlink_active_hours_24h"] = w.count_where(p.inc["nvl_crc"], p.inc["nvl_crc"] > 0, H24)
    out["nvlink_crc_accel_6h"] = log_rise(r[H6], r[H24])
    out["nvlink_crc_peak_share_24h"] = _peak_share(w, p.inc["nvl_crc"])
    out["xid74_7d"] = w.sums(p.events["xid74"], (D7,))[D7][0]


def _shifted(a: np.ndarray, hours: int) -> np.ndarray:
    """``a`` moved ``hours`` buckets later (NaN in front): windows over it end that far back."""
    pad = np.full((hours, a.shape[1]), np.nan, dtype=a.dtype)
    return np.vstack([pad, a[:-hours]]) if a.shape[0] > hours else np.full_like(a, np.nan)


def _relative(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    """Per counter family of ``RELATIVE``: the GPU against its own past (peers in ``_ranks``)."""
    for key, prefix, _, _ in RELATIVE:
        a = p.inc[key]
        sums = w.sums(a, (H24, H72, D7))
        (s24, k24), (s7, k7) = sums[H24], sums[D7]
        sb, kb = s7 - s24, k7 - k24
        with np.errstate(invalid="ignore", divide="ignore"):
            m24 = np.where(k24 > 0, s24 / k24, np.nan)
            mb = np.where(kb > 0, sb / kb, np.nan)
        out[f"{prefix}_m24"] = m24  # hourly mean over the hours read: a gap is not a zero
        out[f"{prefix}_log_vs_own"] = np.log1p(m24) - np.log1p(mb)
        before_peak = w.peak(_shifted(a, H24), D7 - H24)
        out[f"{prefix}_peak_vs_own"] = np.log1p(w.peak(a, H24)) - np.log1p(before_peak)
        # a slow climb (weeks) reads flat against the last week; against the quietest day of
        # the two weeks it does not, where a board that was always this busy still reads flat
        quiet = w.quietest_day(a, QUIET_DAYS, min_days=QUIET_MIN_DAYS)
        out[f"{prefix}_vs_quietest_14d"] = np.log1p(m24) - np.log1p(quiet)
        new = (s24 > 0) & (sb == 0)
        out[f"{prefix}_new_24h"] = np.where((kb >= H24) & (k24 > 0), new.astype(float), np.nan)
        out[f"{prefix}_growth_72h"] = w.slope(np.log1p(a), H72)
        act = w.count_where(a, a > 0, H72)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{prefix}_active_share_72h"] = act / sums[H72][1]


def _ranks(meta: pd.DataFrame, out: dict[str, np.ndarray]) -> None:
    """Per counter family: the GPU against its node's other GPUs and its model's, by rank
    (unchanged when every count is scaled) and by log ratio to the node median."""
    t = meta["t"].to_numpy()
    for _, prefix, _, _ in RELATIVE:
        m24 = out.pop(f"{prefix}_m24")
        frame = pd.DataFrame({"v": m24, "t": t, "host": meta["hostname"].to_numpy()})
        frame["model"] = meta["model"].to_numpy()
        for scope, col in (("node", "host"), ("model", "model")):
            g = frame.groupby(["t", col], sort=False)["v"]
            below = g.rank(method="min").to_numpy() - 1.0  # peers strictly lower (NaN: unread)
            peers = g.transform("count").to_numpy() - 1.0
            with np.errstate(invalid="ignore", divide="ignore"):
                rank = np.where(peers > 0, below / peers, np.nan)
            out[f"{prefix}_{scope}_rank_24h"] = rank
            if scope == "node":
                med = g.transform("median").to_numpy()
                # only "worse than its peers" counts: below a busy median is not scale-free
                out[f"{prefix}_vs_node_log_24h"] = np.maximum(np.log1p(m24) - np.log1p(med), 0)
        signs = (
            (out[f"{prefix}_log_vs_own"] > np.log(4.0)).astype(float)
            + (out[f"{prefix}_peak_vs_own"] > np.log(4.0))
            + (out[f"{prefix}_new_24h"] > 0)
            + (out[f"{prefix}_growth_72h"] > 0.02)
            + ((out[f"{prefix}_node_rank_24h"] >= 0.99) & (m24 > 0))
        )
        out[f"{prefix}_anomaly"] = np.where(np.isnan(m24), np.nan, signs)


def _gaps(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    """Silence: hours the GPU life sent nothing, from its first sample on (before it there is
    no GPU to be silent), counted, never filled in as zeros."""
    T, G = p.seen.shape
    alive = np.arange(T)[:, None] >= p.first[None, :]
    missing = np.where(alive, (~p.seen).astype(np.float32), np.nan)
    for h, name in ((H24, "gap_hours_24h"), (D7, "gap_hours_7d")):
        out[name] = w.sums(missing, (h,))[h][0]
    run = np.zeros((T, G), dtype=np.float32)  # hours without a sample ending at each hour
    for t in range(T):
        run[t] = np.where(p.seen[t], 0.0, (run[t - 1] if t else 0.0) + 1.0)
    run = np.where(alive, run, np.nan)
    out["longest_gap_h_7d"] = np.minimum(w.peak(run, D7), float(D7))
    width, wmax = p.gauge["pcie_link_width"], p.gauge["pcie_link_width_max"]
    low = width < wmax - 0.5
    lrun = np.zeros((T, G), dtype=np.float32)  # an unread hour neither breaks nor extends it
    for t in range(T):
        prev = lrun[t - 1] if t else 0.0
        lrun[t] = np.where(np.isnan(width[t]), prev, np.where(low[t], prev + 1.0, 0.0))
    out["pcie_width_low_run_h"] = np.where(np.isnan(w.last(wmax)), np.nan, w.last(lrun))


def _xid(p: HourlyPanel, w: Windows, out: dict[str, np.ndarray]) -> None:
    for ch, wins in (
        ("xid_hw", (H24, D7)),
        ("xid_app", (H24, D7)),
        ("xid_fatal", (H24,)),
        ("gpu_lost", (H24,)),
    ):
        for h, (s, _) in w.sums(p.events[ch], wins).items():
            out[f"{ch}_{'24h' if h == H24 else '7d'}"] = s


def _peers(meta: pd.DataFrame, out: dict[str, np.ndarray]) -> None:
    frame = pd.DataFrame({s: out[s] for s in PEER_SIGNALS})
    for scope, col in (("node", "hostname"), ("rack", "rack")):
        groups = [meta["t"].to_numpy(), meta[col].to_numpy()]
        med = frame.groupby(groups, sort=False).transform("median")
        # a GPU without a known rack has no rack peers: unknown, not "like its peers"
        unknown = (meta[col].to_numpy() == "") if col == "rack" else np.zeros(len(meta), bool)
        for s in PEER_SIGNALS:
            diff = frame[s].to_numpy() - med[s].to_numpy()
            out[f"{s}_vs_{scope}"] = np.where(unknown, np.nan, diff)


#: GPUs of a fleet with a spread rise at a scoring hour below which the fleet's own scale of
#: rises is unknown (``spread_rise_vs_fleet`` is NaN).
FLEET_MIN_GPUS = 16
#: Floor on that scale (C): a fleet whose spreads hold still to the tenth of a degree does not
#: turn a rise of 0.3 C into a large one.
FLEET_SCALE_FLOOR_C = 0.1


#: rises read against the whole fleet's: (source in ``out``, feature); sources starting with
#: "_" are intermediate and leave ``out`` afterwards
FLEET_SCALED = (
    ("spread_rise_c", "spread_rise_vs_fleet"),
    ("_hbm_load_rise", "hbm_load_rise_vs_fleet"),
    ("_core_load_rise", "core_load_rise_vs_fleet"),
)


#: what ``fleet_stats`` keeps of each rise against the fleet's: its median and scale
_STATS = ("median", "scale")


def _fleet_scaled(
    meta: pd.DataFrame, out: dict[str, np.ndarray], fleet: pd.DataFrame | None = None
) -> None:
    """Thermal rises against the rises of the whole fleet at the same scoring hour.

    Benign drift moves every board's temperatures from day to day; a failing cold plate moves
    one. The fleet's own p95 deviation is the scale: on a still fleet a 2 C rise stands out, on
    one whose spreads wander by 2 C a day it does not (issue 17, waves 16-17). ``fleet``
    (``fleet_stats`` of the whole fleet, by scoring time) gives the median and scale in place
    of the rows' own: a shard's."""
    groups = [meta["t"].to_numpy(), meta["fleet"].to_numpy()]
    for source, name in FLEET_SCALED:
        rise = out.pop(source) if source.startswith("_") else out[source]
        if fleet is None:
            out[name] = against_fleet(rise, groups)
        else:
            at = meta["at"].to_numpy()
            med, scale = (fleet[f"{name}:{k}"].reindex(at).to_numpy(np.float64) for k in _STATS)
            out[name] = (np.asarray(rise, dtype=np.float64) - med) / np.maximum(
                scale, FLEET_SCALE_FLOOR_C
            )


#: error rates read against the fleet's level at the same hour (wave 24): (source, per-day
#: factor, level feature, against-the-level feature)
FLEET_LEVEL = (
    ("sbe_per_day_7d", 1.0, "sbe_fleet_level_7d", "sbe_vs_fleet_level_7d"),
    ("pcie_replay_per_min_7d", 1440.0, "pcie_fleet_level_7d", "pcie_vs_fleet_level_7d"),
)
#: The quantile over the fleet's GPUs that reads its level: most boards log no error in a
#: week, so the median says nothing; the 90th percentile moves with the benign noise.
FLEET_LEVEL_QUANTILE = 0.9


def _fleet_level(
    meta: pd.DataFrame, out: dict[str, np.ndarray], fleet: pd.DataFrame | None = None
) -> None:
    """Each error rate against the whole fleet's at the same hour.

    Another generator's, or another fleet's, benign noise may be forty times this simulator's:
    a single-bit burst every week on an ordinary board. The rate alone then reads as a
    precursor; against the fleet's level it does not (issue 17, wave 24). NaN in a fleet of
    fewer than ``FLEET_MIN_GPUS`` GPUs reading the counter. ``fleet`` (``fleet_stats`` of the
    whole fleet, by scoring time) gives the level in place of the rows' own: a shard's."""
    groups = [meta["t"].to_numpy(), meta["fleet"].to_numpy()]
    for source, per_day, level, against in FLEET_LEVEL:
        v = np.log1p(np.asarray(out[source], dtype=np.float64) * per_day)
        if fleet is None:
            q = _group_level(v, groups)
        else:  # a time the table lacks has no level: unknown, not the shard's own
            q = fleet[level].reindex(meta["at"].to_numpy()).to_numpy(np.float64)
        out[level] = q
        out[against] = v - q


def _group_level(v: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """``FLEET_LEVEL_QUANTILE`` of ``v`` per group, NaN under ``FLEET_MIN_GPUS`` readings."""
    g = pd.Series(v, dtype=float).groupby(groups, sort=False)
    q = g.transform("quantile", FLEET_LEVEL_QUANTILE).to_numpy(np.float64)
    return np.where((g.transform("count") >= FLEET_MIN_GPUS).to_numpy(), q, np.nan)


#: the fields ``fleet_stats`` reads: all a shard needs of the GPUs it does not score (the
#: error counters for the levels, temperatures and power for the thermal rises)
FLEET_FIELDS: tuple[str, ...] = (
    *INCREASES["sbe"][0],
    *INCREASES["replay"][0],
    "gpu_temp_c",
    "mem_temp_c",
    "power_w",
)


def _fleet_sources(p: HourlyPanel, w: Windows) -> dict[str, np.ndarray]:
    """The values ``FLEET_LEVEL`` and ``FLEET_SCALED`` read, as ``_memory``, ``_pcie`` and
    ``_thermal`` compute them."""
    spread = p.gauge["spread_c"]
    return {
        "sbe_per_day_7d": w.rates(p.inc["sbe"], (D7,), 24.0)[D7],
        "pcie_replay_per_min_7d": w.rates(p.inc["replay"], (D7,), 1 / 60)[D7],
        "spread_rise_c": w.means(spread, (H24,))[H24] - _mean_before(w, spread),
        **_load_rises(p, w),
    }


def fleet_stats(panel: HourlyPanel, rows: np.ndarray) -> pd.DataFrame:
    """What the features read of the whole fleet, over ``rows`` ((t, g) pairs), one row per
    scoring time (index ``at``, as ``compute_features``' meta): each ``FLEET_LEVEL`` level,
    and the median and scale (``<feature>:median``, ``<feature>:scale``) of each
    ``FLEET_SCALED`` rise. Every shard of a fleet passes it to ``compute_features``, so its
    GPUs are read against the whole fleet, not the shard. ``panel`` needs only
    ``FLEET_FIELDS`` (``history.load_panel(fields=)``)."""
    t, g = rows[:, 0], rows[:, 1]
    at = (panel.hours[t] + HOUR_S).astype(np.float64)
    w = Windows(t, g, panel.first, n_buckets=panel.shape[0], last_fraction=panel.last_fraction)
    src = _fleet_sources(panel, w)
    table = {
        level: _group_level(np.log1p(src[source] * per_day), [t])
        for source, per_day, level, _ in FLEET_LEVEL
    }
    for source, name in FLEET_SCALED:
        for k, v in zip(_STATS, _median_scale(src[source], [t]), strict=True):
            table[f"{name}:{k}"] = v
    frame = pd.DataFrame(table, index=pd.Index(at, name="at"))
    return frame[~frame.index.duplicated()].sort_index()


def against_fleet(rise: np.ndarray | pd.Series, groups: list[np.ndarray]) -> np.ndarray:
    """Each value minus its group's median, over the group's 95th-percentile deviation (at
    least ``FLEET_SCALE_FLOOR_C``); NaN in a group of fewer than ``FLEET_MIN_GPUS`` values."""
    med, scale = _median_scale(rise, groups)
    z = (np.asarray(rise, dtype=np.float64) - med) / np.maximum(scale, FLEET_SCALE_FLOOR_C)
    return np.where(np.isnan(med), np.nan, z)


def _median_scale(
    rise: np.ndarray | pd.Series, groups: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Per value, its group's median and 95th-percentile deviation from it; NaN in a group of
    fewer than ``FLEET_MIN_GPUS`` values."""
    rise = pd.Series(np.asarray(rise, dtype=np.float64))
    g = rise.groupby(groups, sort=False)
    med = g.transform("median")
    scale = (rise - med).abs().groupby(groups, sort=False).transform("quantile", 0.95)
    known = (g.transform("count") >= FLEET_MIN_GPUS).to_numpy()
    return np.where(known, med, np.nan), np.where(known, scale, np.nan)


def compute_features(
    panel: HourlyPanel, rows: np.ndarray, *, fleet: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Features for ``rows`` ((t, g) pairs, e.g. from ``rows_at``): (meta, X).

    ``meta`` has ``at`` (the end of bucket t: the scoring time), the GPU's identity, ``t`` and
    ``fatal_xid`` (the last fatal Xid code in 24 h, NaN if none), ``pcie_width`` and
    ``pcie_width_max`` (the last read, for the link rule's words);
    ``X`` has one float column per ``FEATURE_NAMES`` entry, NaN where unknown.
    ``fleet``: the whole fleet's ``fleet_stats`` at the rows' times, for a shard of it.
    """
    t, g = rows[:, 0], rows[:, 1]
    keys = panel.keys
    meta = pd.DataFrame(
        {
            "at": (panel.hours[t] + HOUR_S).astype(np.float64),
            "key": keys["key"].to_numpy()[g],
            "uuid": keys["uuid"].to_numpy()[g],
            "hostname": keys["hostname"].to_numpy()[g],
            "gpu": keys["gpu"].to_numpy()[g],
            "model": keys["model"].to_numpy()[g],
            "rack": keys["rack"].to_numpy()[g],
            "t": t,
        }
    )
    # one fleet per panel, unless panels of several were put side by side (``concat_panels``)
    fleet_of = keys["fleet"].to_numpy()[g] if "fleet" in keys else np.full(len(t), "")
    w = Windows(t, g, panel.first, n_buckets=panel.shape[0], last_fraction=panel.last_fraction)
    out: dict[str, np.ndarray] = {}
    for part in (_memory, _thermal, _pcie, _nvlink, _xid, _relative, _gaps):
        part(panel, w, out)
    out["history_h"] = np.minimum(w.age, float(D7))
    _peers(meta, out)
    _ranks(meta, out)
    _fleet_scaled(meta.assign(fleet=fleet_of), out, fleet)
    _fleet_level(meta.assign(fleet=fleet_of), out, fleet)
    meta["fatal_xid"] = w.latest(panel.fatal_xid, H24)  # for the Xid catalogue's action
    for gauge in ("pcie_link_width", "pcie_link_width_max"):  # the link rule says them
        meta[gauge.replace("_link", "")] = w.last(panel.gauge[gauge])
    X = pd.DataFrame({n: np.asarray(out[n], dtype=np.float32) for n in FEATURE_NAMES})
    return meta, X
