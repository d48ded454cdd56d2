"""The report's charts as PNGs (matplotlib, Agg): availability by node, risk over time,
failures with their lead time, utilisation by GPU model, GPU-hours and cost by tenant.

A chart whose facts are absent is not drawn; ``charts`` returns the files it wrote by name.
"""

from __future__ import annotations

from pathlib import Path

from gpuwarden.health import GpuState
from gpuwarden.reports.model import Facts
from gpuwarden.wording import figure

MAX_BARS = 30


def charts(f: Facts, folder: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out: dict[str, Path] = {}

    def save(name: str, fig) -> None:
        path = folder / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out[name] = path

    a = f.availability
    if a is not None and a.by_node:
        nodes = sorted(a.by_node, key=lambda n: n.availability_pct)[:MAX_BARS]
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.28 * len(nodes) + 1)))
        ax.barh([n.hostname for n in nodes], [n.availability_pct for n in nodes], color="#4c78a8")
        ax.set_xlim(min(90.0, min(n.availability_pct for n in nodes) - 2), 100.5)
        ax.set_xlabel("availability, % of GPU-hours up")
        ax.set_title(f"Least available nodes (fleet {figure(a.fleet_availability_pct)}%)")
        ax.invert_yaxis()
        save("availability", fig)
    if f.risk.daily:
        days = [d for d, _, _ in f.risk.daily]
        fig, ax = plt.subplots(figsize=(8, 3))
        for column, marker, state, color in ((1, "o", GpuState.AT_RISK, "#f58518"),
                                             (2, "s", GpuState.UNHEALTHY, "#e45756")):  # fmt: skip
            counts = [row[column] for row in f.risk.daily]
            ax.plot(days, counts, marker=marker, label=str(state), color=color)
        ax.set_ylabel("GPUs at the end of the day")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # GPUs, not 0.2 of one
        ax.set_ylim(bottom=0)
        ax.set_title("GPUs at risk over the period (stored verdicts)")
        ax.legend()
        ax.tick_params(axis="x", rotation=30)
        save("risk", fig)
    if f.failures.items:
        items = f.failures.items[:MAX_BARS]
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(items) + 1)))
        labels = [f"{i.hostname} GPU {i.gpu} ({i.date})" for i in items]
        leads = [i.lead_time_h or 0.0 for i in items]
        # the axis spans a day at least (the lead the model is judged at), so a week with no
        # catch shows short stubs on a day's axis, not stubs stretched across 0-0.02 h
        span = max([*leads, 24.0]) * 1.05
        stub = span * 0.02  # a missed failure: a short red stub, labelled
        colors = ["#54a24b" if i.caught else "#e45756" if i.watched else "#9d9d9d" for i in items]
        ax.barh(
            labels,
            [lead if i.caught else stub for lead, i in zip(leads, items, strict=True)],
            color=colors,
        )
        for y, i in enumerate(items):
            if not i.caught:
                said, color = ("missed", "#e45756") if i.watched else ("not watched", "#9d9d9d")
                ax.text(stub * 1.5, y, said, va="center", color=color)
        ax.set_xlim(0, span)
        ax.axvline(24.0, color="#888888", linestyle=":", linewidth=1)
        ax.set_xlabel("hours flagged before failing (red: missed; grey: no verdict before it; "
                      "dotted: 24 h)")  # fmt: skip
        unwatched = f", {f.failures.unwatched} not watched" if f.failures.unwatched else ""
        ax.set_title(f"Failures: {f.failures.caught} caught, {f.failures.missed} missed{unwatched}")
        ax.invert_yaxis()
        save("failures", fig)
    u = f.utilisation
    if u is not None and u.by_model:
        models = [m.model for m in u.by_model]
        fig, ax = plt.subplots(figsize=(8, 3))
        xs = range(len(models))
        ax.bar(
            [x - 0.2 for x in xs],
            [m.gpu_util_pct or 0 for m in u.by_model],
            0.4,
            label="GPU utilisation %",
        )
        ax.bar(
            [x + 0.2 for x in xs],
            [m.memory_used_pct or 0 for m in u.by_model],
            0.4,
            label="memory used %",
        )
        ax.set_xticks(list(xs), models)
        ax.set_ylim(0, 100)
        ax.set_title("Utilisation by GPU model (mean of hourly means)")
        ax.legend()
        save("utilisation", fig)
    s = f.scheduler
    if s is not None and s.by_tenant:
        tenants = s.by_tenant[:MAX_BARS]
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.3 * len(tenants) + 1)))
        if f.cost is not None:
            ax.barh(
                [t.tenant for t in tenants], [f.cost.by_tenant.get(t.tenant, 0.0) for t in tenants]
            )
            ax.set_xlabel(f"cost, {f.cost.currency}")
            ax.set_title(f"Cost by tenant ({f.cost.total:,.2f} {f.cost.currency})")
        else:
            ax.barh([t.tenant for t in tenants], [t.gpu_hours for t in tenants])
            ax.set_xlabel("GPU-hours (no price set)")
            ax.set_title("GPU-hours by tenant")
        ax.invert_yaxis()
        save("tenants", fig)
    return out
