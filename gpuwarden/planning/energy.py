"""Energy: what sleeping idle nodes saves on a real trace, and what it costs in queue wait.

``replay_sleep`` replays the openb default trace (Alibaba's production GPU cluster, 1,213
nodes, 6,212 GPUs; pods' creation and deletion times give arrivals and durations) through the
real ``Scheduler`` with a queue, with or without a ``SleepController``, and integrates a power
model over time:

    node power (W) = base_w + sum over GPUs of idle_w + (board_w - idle_w) x allocated share
    asleep: sleep_w (the BMC and the NIC watching for the magic packet); waking: base + idle

``board_w`` is the GPU's board power from its datasheet (``BOARD_POWER_W``); openb's G2 and G3
are undisclosed models, and take ``unknown_board_w`` (stated in every table). Allocation stands
in for utilisation: a GPU that holds work draws in proportion to its share, an upper bound on a
real GPU's busy time. The trace's times are seconds from its start; we take the start to be a
Monday 00:00, so the default window (02:00-06:00 and weekends) falls where it would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.planning.events import Events
from gpuwarden.scheduler import Job, NodeSpec, Scheduler
from gpuwarden.scheduler.billing import BOARD_POWER_W
from gpuwarden.scheduler.openb import Pod
from gpuwarden.scheduler.sleep import SleepController, SleepPolicy, critical

# 2024-01-01T00:00:00Z was a Monday: the trace's second 0 is put there
MONDAY_0 = 1_704_067_200.0


#: What the sleep replay names its pods when they are the shared data's default trace.
DEFAULT_TRACE = "openb default trace"


@dataclass(frozen=True)
class PowerModel:
    """Watts: ``base_w`` a node without its GPUs when awake (CPUs, memory, fans, NICs),
    ``idle_share`` of a GPU's board power it draws idle, ``sleep_w`` a sleeping node."""

    base_w: float = 250.0
    idle_share: float = 0.15
    sleep_w: float = 10.0
    unknown_board_w: float = 250.0
    board_w: dict[str, float] = field(default_factory=lambda: dict(BOARD_POWER_W))

    def gpu_w(self, model: str) -> float:
        return self.board_w.get(model, self.unknown_board_w)


@dataclass(frozen=True)
class SleepReplay:
    """One replay: energy, and the wait of every pod that started (seconds)."""

    kwh: float
    waits_s: np.ndarray
    critical_waits_s: np.ndarray
    never_started: int
    sleeps: int
    wakes: int
    asleep_node_h: float
    days: float
    #: at each tick: seconds from the start, fleet power (W), nodes asleep
    series: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))


def replay_sleep(
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    policy: SleepPolicy | None,
    *,
    power: PowerModel | None = None,
    tick_s: float = 300.0,
    days: float | None = None,
    start_s: float | None = None,
    policy_name: str = "bestfit",
) -> SleepReplay:
    """Replay ``pods`` (arrival at creation, running for deletion - creation once placed) on
    ``nodes``; sleep by ``policy`` (None: always on). The replay starts at ``start_s`` (default:
    the midnight before the first percentile of creation times: the openb default trace has a
    handful of pods over its first 115 days, then 34 days of real demand); pods alive then
    arrive at the start with what is left of their lives. ``days`` cuts the replay."""
    if policy is not None and policy.dry_run:
        raise InputError("a dry-run policy changes nothing; replay with dry_run=False")
    power = power or PowerModel()
    sched = Scheduler(nodes, policy=policy_name)
    c = sched.cluster
    ctl = SleepController(sched, policy) if policy is not None else None
    timed = [p for p in pods if p.created_s is not None]
    if not timed:
        raise InputError("no pod has a creation time")
    if start_s is None:
        first = float(np.percentile([p.created_s for p in timed], 1))
        start_s = math.floor(first / 86_400.0) * 86_400.0
    end = max((p.deleted_s or p.created_s or 0.0) for p in timed) - start_s
    if days is not None:
        end = min(end, days * 86_400.0)
    events = Events()
    push = events.push

    _DONE, _ARRIVE, _TICK = 0, 1, 2
    duration: dict[str, float] = {}
    arrived: dict[str, float] = {}
    for p in timed:
        assert p.created_s is not None
        born, dies = p.created_s - start_s, (p.deleted_s or math.inf) - start_s
        if born > end or dies <= 0:
            continue
        born = max(0.0, born)
        duration[p.job.job_id] = max(0.0, min(dies, end) - born)
        push(born, _ARRIVE, p.job)
    t = 0.0
    while t <= end:
        push(t, _TICK, None)
        t += tick_s
    board = np.array([power.gpu_w(s.gpu_model) for s in nodes])
    idle = power.idle_share * board
    n_gpus = c.n_gpus.astype(float)
    waits: list[float] = []
    crit_waits: list[float] = []
    joules, asleep_s, last = 0.0, 0.0, 0.0
    crit = {p.job.job_id for p in timed if critical(p.job)}
    series: list[tuple[float, float, float]] = []

    def node_power() -> tuple[np.ndarray, np.ndarray]:
        used = np.where(c.exists, 1000 - c.free, 0).sum(axis=1) / 1000.0
        awake = power.base_w + n_gpus * idle + (board - idle) * used
        if ctl is None:
            return awake, np.zeros(c.n_nodes, dtype=bool)
        asleep = np.zeros(c.n_nodes, dtype=bool)
        for n, st in ctl.state.items():
            if st == "asleep":
                asleep[c.index[n]] = True
        return np.where(asleep, power.sleep_w, awake), asleep

    def start_round(now: float) -> None:
        for d in sched.schedule(now=now):
            if d.placed:
                w = now - arrived[d.job_id]
                waits.append(w)
                if d.job_id in crit:
                    crit_waits.append(w)
                push(now + duration[d.job_id], _DONE, d.job_id)
        if ctl is not None and sched.pending:
            ctl.need(MONDAY_0 + now, sched.pending)

    watts, asleep = node_power()
    while events:
        now, kind, payload = events.pop()
        if now > end:
            break
        joules += float(watts.sum()) * (now - last)
        asleep_s += float(asleep.sum()) * (now - last)
        last = now
        if kind == _ARRIVE:
            assert isinstance(payload, Job)
            arrived[payload.job_id] = now
            sched.submit(payload)
        elif kind == _DONE:
            sched.release(str(payload))
        else:
            series.append((now, float(watts.sum()), float(asleep.sum())))
        if kind == _TICK and ctl is not None:
            used = np.where(c.exists, 1000 - c.free, 0).sum(axis=1) / np.maximum(n_gpus, 1) / 1000
            util = {n: float(u) for n, u in zip(c.names, used, strict=True)}
            ctl.step(MONDAY_0 + now, util)
        start_round(now)
        watts, asleep = node_power()
    joules += float(watts.sum()) * (end - last)
    return SleepReplay(
        joules / 3.6e6,
        np.array(waits),
        np.array(crit_waits),
        len(duration) - len(waits),
        sum(1 for a in ctl.log if a.action == "sleep") if ctl else 0,
        sum(1 for a in ctl.log if a.action == "wake") if ctl else 0,
        asleep_s / 3600,
        end / 86_400.0,
        np.array(series).reshape(-1, 3),
    )


def _fmt_wait(w: np.ndarray) -> tuple[str, str]:
    if w.size == 0:
        return "-", "-"
    return f"{np.mean(w) / 60:.2f}", f"{np.percentile(w, 99) / 60:.2f}"


def render_sleep(
    on: SleepReplay, slept: SleepReplay, power: PowerModel, trace: str = DEFAULT_TRACE
) -> str:
    """The table docs/planning.md and docs/benchmarks.md show; ``trace`` names the pods."""
    saved = 100 * (1 - slept.kwh / on.kwh)
    rows = [
        f"{trace}, {on.days:.1f} days; node base {power.base_w:g} W, GPU idle "
        f"{100 * power.idle_share:g}% of board power, asleep {power.sleep_w:g} W, G2/G3 "
        f"{power.unknown_board_w:g} W",
        "",
        "| run | kWh | kWh saved | node-hours asleep | sleeps | wakes | mean wait (min) | "
        "p99 wait (min) | critical mean wait (min) | critical p99 wait (min) | never started |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r, s in (("always on", on, "-"), ("sleep", slept, f"{saved:.1f}%")):
        mw, pw = _fmt_wait(r.waits_s)
        cm, cp = _fmt_wait(r.critical_waits_s)
        rows.append(
            f"| {name} | {r.kwh:,.0f} | {s} | {r.asleep_node_h:,.0f} | {r.sleeps:,} | {r.wakes:,} | "
            f"{mw} | {pw} | {cm} | {cp} | {r.never_started} |"
        )
    return "\n".join(rows)


def plot_sleep(
    on: SleepReplay, slept: SleepReplay, path: str | Path, trace: str = DEFAULT_TRACE
) -> Path:
    """Fleet power over the replay, always on and with sleep, and the nodes asleep (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})  # fmt: skip
    for r, label in ((on, "always on"), (slept, "idle-node sleep")):
        top.plot(r.series[:, 0] / 86_400, r.series[:, 1] / 1000, label=label, lw=0.8)
    top.set_ylabel("fleet power (kW)")
    top.legend(loc="center right")  # below the always-on line, beside the sleeping hours
    bottom.plot(slept.series[:, 0] / 86_400, slept.series[:, 2], lw=0.8, color="tab:orange")
    bottom.set_ylabel("nodes asleep")
    bottom.set_xlabel("day of the replay (day 0 = a Monday)")
    saved = 100 * (1 - slept.kwh / on.kwh)
    top.set_title(f"{trace}: {on.kwh:,.0f} kWh always on, {slept.kwh:,.0f} kWh "
                  f"with sleep ({saved:.1f}% less)")  # fmt: skip
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ---- power caps and clocks ------------------------------------------------------------------


@dataclass(frozen=True)
class PowerAdvice:
    """Advice for one job class from its measured GPUs: a power limit and the expected
    effect. ``cap_w`` None: leave the GPU as it is."""

    job_class: str
    gpus: int
    mean_power_w: float
    mean_util_pct: float
    board_w: float
    cap_w: float | None
    clock_cut_pct: float
    power_saved_pct: float
    slowdown_pct: float
    why: str


#: The model behind the advice. Dynamic power goes as f x V^2 and, in the upper DVFS range,
#: voltage with frequency, so a core clock cut of c cuts dynamic power by about 1 - (1 - c)^3;
#: static and memory power do not move. Memory-bound work (LLM decode) barely slows: Maliakel,
#: Ilager and Brandic (arXiv:2501.08219, 2025) measured a 1-6% latency increase for large clock
#: cuts because decode, 77-91% of inference time, is insensitive to the GPU clock. The guideline's
#: figure (-20% clock, -30% power, +5% latency) is this model with ~80% dynamic power.
DYNAMIC_SHARE = 0.8


def clock_cut_effect(cut: float, *, memory_bound: bool) -> tuple[float, float]:
    """(power saved, slowdown), as shares, of cutting the core clock by ``cut`` (0..1)."""
    if not 0 <= cut < 1:
        raise InputError(f"clock cut must be in [0, 1), got {cut}")
    saved = DYNAMIC_SHARE * (1 - (1 - cut) ** 3)
    # compute-bound work slows with the clock; memory-bound work by a quarter of the cut
    slow = cut / 4 if memory_bound else 1 / (1 - cut) - 1
    return saved, slow


def advise(
    job_class: str,
    power_w: Sequence[float],
    util_pct: Sequence[float],
    board_w: float,
    *,
    clock_cut: float = 0.20,
) -> PowerAdvice:
    """Advice from a class's measured samples (NaN = not measured, dropped). Inference (or any
    class whose GPUs draw under 60% of board power at under 70% utilisation: memory-bound or
    latency-bound) gets a cap at the power a ``clock_cut`` leaves; busy compute-bound training
    keeps full clocks (a cap slows it as much as it saves)."""
    p = np.array([x for x in power_w if x == x], dtype=float)
    u = np.array([x for x in util_pct if x == x], dtype=float)
    if p.size == 0 or u.size == 0:
        raise InputError(f"{job_class}: no power or utilisation samples")
    mean_p, mean_u = float(p.mean()), float(u.mean())
    memory_bound = job_class == "inference" or (mean_p < 0.6 * board_w and mean_u < 70)
    if not memory_bound:
        return PowerAdvice(job_class, p.size, mean_p, mean_u, board_w, None, 0.0, 0.0, 0.0,
                           "compute-bound at high power: a cap would slow it as much as it "
                           "saves")  # fmt: skip
    saved, slow = clock_cut_effect(clock_cut, memory_bound=True)
    cap = max(float(np.percentile(p, 95)) * (1 - saved), 0.3 * board_w)
    return PowerAdvice(job_class, p.size, mean_p, mean_u, board_w, round(cap), 100 * clock_cut,
                       100 * saved, 100 * slow,
                       "memory- or latency-bound: clocks matter little to its speed")  # fmt: skip


def kwh_from_power(mean_power_w: float, hours: float) -> float:
    if math.isnan(mean_power_w):
        return math.nan
    return mean_power_w * hours / 1000.0


__all__ = ["BOARD_POWER_W", "DEFAULT_TRACE", "PowerAdvice", "PowerModel", "SleepReplay", "advise", "plot_sleep",
           "clock_cut_effect", "render_sleep", "replay_sleep"]  # fmt: skip
