"""The report as blocks (headings, paragraphs marked by origin, tables, charts), written out as
Markdown and as a self-contained HTML page (charts beside it as PNGs).

Prose carries its origin: ``[checked LLM]`` text was written by the LLM and passed the claim
checker; ``[template]`` text was written by code from the facts. Tables are always code's.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from gpuwarden.health import HARD_SIGNALS
from gpuwarden.reports.model import Facts
from gpuwarden.reports.templates import add_when, change_size, change_unit
from gpuwarden.reports.writer import LLM, Part, Prose
from gpuwarden.wording import counted, figure

#: a hard signal's name in the facts -> its words ("fatal_xid" -> "fatal Xid")
_HARD_WORDS = {s.name: s.what for s in HARD_SIGNALS}

TABLE_ROWS = 15
MARK = {LLM: "[checked LLM]", "template": "[template]"}


@dataclass(frozen=True)
class Block:
    kind: str  # h1, h2, p, parts, items, table, img, note
    text: str = ""
    parts: tuple[Part, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()


#: What the ECC types of a memory-error log (Calchas' format) mean.
_ECC_WORDS = {
    "CE": "corrected",
    "UER": "uncorrectable, recoverable",
    "UEO": "uncorrectable, other",
}


def blocks(f: Facts, prose: Prose, charts: dict[str, Path], llm_desc: str) -> list[Block]:
    b: list[Block] = []
    last = prose_period(f)
    b.append(Block("h1", f"GPU cluster report: {last}"))
    origin = (f"Prose by {llm_desc}, every number, date and name checked against the facts."
              if prose.source == LLM else "Prose from templates (no LLM text).")  # fmt: skip
    b.append(Block("note", f"Generated {f.generated}; facts version {f.version}. {origin}"))
    if prose.usage is not None:
        b.append(Block("note", f"LLM cost: {prose.usage.describe()}."))
    for note in prose.notes:
        b.append(Block("note", note))
    b.append(
        Block(
            "note",
            "[checked LLM]: LLM text that passed the claim check; [template]: text written by code from the facts.",
        )
    )
    b.append(Block("h2", "Summary"))
    b.append(Block("parts", parts=tuple(prose.summary)))
    b.append(Block("h2", "Recommendations"))
    if prose.recommendations:
        items = [
            (Part(f"{p.text} (rests on: {'; '.join(r.cites)})", p.origin))
            for r, p in prose.recommendations
        ]
        b.append(Block("items", parts=tuple(items)))
    else:
        b.append(Block("p", "No recommendation: nothing in the facts calls for one."))
    a = f.availability
    if a is not None:
        b.append(Block("h2", "Availability"))
        _img(b, charts, "availability")
        rows: list[tuple[str, ...]] = [("node", "GPUs", "availability %", "downtime h")]
        rows += [(n.hostname, str(n.gpus), figure(n.availability_pct), figure(n.downtime_h))
                 for n in sorted(a.by_node, key=lambda n: n.availability_pct)[:TABLE_ROWS]]  # fmt: skip
        b.append(Block("table", rows=tuple(rows)))
        rows = [("GPU model", "GPUs", "availability %", "downtime h")]
        rows += [
            (m.model, str(m.gpus), figure(m.availability_pct), figure(m.downtime_h))
            for m in a.by_model
        ]
        b.append(Block("table", rows=tuple(rows)))
    inv = f.inventory
    b.append(Block("h2", "Inventory"))
    b.append(Block("p", f"{counted(inv.gpus, 'GPU')} on {counted(inv.nodes, 'node')}; added "
                   f"{len(inv.added)}, replaced {len(inv.replaced)}, missing {len(inv.missing)}."))  # fmt: skip
    changed = [(r.hostname, str(r.gpu), "replaced", r.date, r.model) for r in inv.replaced]
    # a missing board's date is its last report; an added one's, its first
    changed += [(g.hostname, str(g.gpu), "missing", g.date or "", g.model) for g in inv.missing]
    changed += [(g.hostname, str(g.gpu), "added", g.date or "", g.model) for g in inv.added]
    if changed:
        b.append(
            Block("table", rows=(("node", "GPU", "change", "date", "model"), *changed[:TABLE_ROWS]))
        )
    fl = f.failures
    b.append(Block("h2", "Failures and lead time"))
    _img(b, charts, "failures")
    if fl.items:
        rows = [("node", "GPU", "date", "kind", "Xid", "flagged", "lead time h", "by", "peak risk")]
        rows += [(i.hostname, str(i.gpu), i.date, i.kind, str(i.xid or ""), i.flagged_date or ("missed" if i.watched else "not watched"),
                  figure(i.lead_time_h), i.flag_cause or "", figure(i.peak_risk))
                 for i in fl.items[:TABLE_ROWS]]  # fmt: skip
        b.append(Block("table", rows=tuple(rows)))
    else:
        b.append(Block("p", "No failure in the period."))
    b.append(Block("h2", "GPUs at risk now"))
    _img(b, charts, "risk")
    if f.risk.gpus:
        rows = [("node", "GPU", "model", "state", "risk", "reasons", "action")]
        rows += [(g.hostname, str(g.gpu), g.model, g.state, figure(g.risk) if g.risk is not None else "",
                  "; ".join(g.reasons[:3]), g.action) for g in f.risk.gpus[:TABLE_ROWS]]  # fmt: skip
        b.append(Block("table", rows=tuple(rows)))
    else:
        b.append(Block("p", "No GPU is at risk or unhealthy."))
    al, x = f.alerts, f.xids
    b.append(Block("h2", "Alerts, hard signals and Xids"))
    retag = (
        f"; re-tags {al.retags_ok} ok, {al.retags_failed} failed"
        if al.retags_ok is not None
        else ""
    )
    b.append(Block("p", f"{al.transitions} verdict transitions ({al.to_at_risk} to at-risk, "
                   f"{al.to_unhealthy} to unhealthy, {al.to_ok} to ok; {al.hard_signal_transitions} "
                   f"by a hard signal){retag}. Hard signals: "
                   + (", ".join(f"{_HARD_WORDS.get(k, k)} {counted(v, 'time')}"
                                for k, v in x.hard_signals.items()) or "none") + "."))  # fmt: skip
    if x.by_code:
        rows = [("Xid", "name", "class", "count", "GPUs", "NVIDIA's action")]
        rows += [
            (str(c.code), c.name, c.xid_class, str(c.count), str(c.gpus), c.action)
            for c in x.by_code[:TABLE_ROWS]
        ]
        b.append(Block("table", rows=tuple(rows)))
    if (m := f.memory_errors) is not None:
        b.append(Block("h2", "Memory errors"))
        rows = [("ECC type", "meaning", "errors", "devices")]
        rows += [
            (c.ecc, _ECC_WORDS.get(c.ecc, ""), str(c.errors), str(c.devices)) for c in m.by_type
        ]
        b.append(Block("table", rows=tuple(rows)))
    ut, e = f.utilisation, f.energy
    if ut is not None or e is not None:
        b.append(Block("h2", "Utilisation and energy"))
        _img(b, charts, "utilisation")
    if ut is not None:
        rows = [("GPU model", "GPU boards", "GPU util %", "memory used %", "energy kWh")]
        rows += [
            (
                m.model,
                str(m.gpus),
                figure(m.gpu_util_pct),
                figure(m.memory_used_pct),
                figure(m.energy_kwh),
            )
            for m in ut.by_model
        ]
        b.append(Block("table", rows=tuple(rows)))
    if e is not None:
        co2 = (
            f"; {figure(e.co2_kg)} kg CO2 at {figure(e.grid_g_co2_per_kwh)} g/kWh"
            if e.co2_kg is not None
            else ""
        )
        b.append(
            Block(
                "p",
                f"Energy: {figure(e.energy_kwh)} kWh over {figure(e.gpu_hours_measured)} GPU-hours with power readings{co2}.",
            )
        )
    s = f.scheduler
    if s is not None:
        b.append(Block("h2", "Scheduler, tenants and cost"))
        _img(b, charts, "tenants")
        b.append(Block("p", f"{counted(s.jobs_started, 'job')} started; queue wait median "
                       f"{figure(s.queue_wait_median_min)} min, p95 {figure(s.queue_wait_p95_min)} min; "
                       f"{s.jobs_waiting} waiting now; {counted(s.preemptions, 'preemption')}; "
                       f"{figure(s.gpu_hours)} of {counted(s.capacity_gpu_hours, 'GPU-hour')} allocated "
                       f"({figure(s.allocated_pct)}%)."))  # fmt: skip
        rows = [
            (
                "tenant",
                "GPU-hours",
                "share %",
                "quota GPUs",
                "quota used %",
                "GPU util %",
                "memory %",
                "cost",
            )
        ]
        rows += [(t.tenant, figure(t.gpu_hours), figure(t.share_pct), figure(t.quota_gpus), figure(t.quota_used_pct),
                  figure(t.gpu_util_pct), figure(t.memory_used_pct), f"{f.cost.by_tenant.get(t.tenant, 0):,.2f} {f.cost.currency}" if f.cost else "")
                 for t in s.by_tenant[:TABLE_ROWS]]  # fmt: skip
        b.append(Block("table", rows=tuple(rows)))
    if f.capacity is not None:
        _capacity(b, f)
    if f.spot is not None:
        _spot(b, f)
    if f.namespaces:
        b.append(Block("h2", "Kubernetes namespaces"))
        rows = [("namespace", "GPU-hours held", "share %", "GPU util %", "memory %")]
        rows += [(t.tenant, figure(t.gpu_hours), figure(t.share_pct), figure(t.gpu_util_pct), figure(t.memory_used_pct))
                 for t in f.namespaces[:TABLE_ROWS]]  # fmt: skip
        b.append(Block("table", rows=tuple(rows)))
    if f.changes:
        b.append(Block("h2", "Biggest changes against the previous period"))
        rows = [("metric", "before", "after", "change")]
        rows += [
            (
                c.metric,
                change_unit(c.before, c.unit),
                change_unit(c.after, c.unit),
                change_size(c),
            )
            for c in f.changes
        ]
        b.append(Block("table", rows=tuple(rows)))
    if f.absent:
        b.append(Block("h2", "Not in this report"))
        b.append(
            Block("items", parts=tuple(Part(f"{a.section}: {a.why}", "template") for a in f.absent))
        )
    return b


def prose_period(f: Facts) -> str:
    from datetime import UTC, datetime

    last = datetime.fromtimestamp(f.period.until_ts - 1, UTC).strftime("%Y-%m-%d")
    return f"{f.period.since[:10]} to {last}"


def _capacity(b: list[Block], f: Facts) -> None:
    c = f.capacity
    assert c is not None
    b.append(Block("h2", "Capacity plan"))
    b.append(Block("p", f"Demand forecast for the next week from {c.trained_hours} of "
                   f"{counted(c.history_hours, 'hour')} of scheduler history ({figure(c.interval_level_pct)}% "
                   f"interval); plan = forecast x {figure(c.buffer)} buffer over {counted(c.plan_weeks, 'week')}, "
                   f"GPUs ordered {counted(c.lead_weeks, 'week')} ahead; break-even from {c.prices}."))  # fmt: skip
    rows = [("GPU model", "GPUs now", "forecast mean", "interval", "peak need", "decision",
             "growth %/month", "GPU util %", "break-even own %")]  # fmt: skip
    for m in c.by_model:
        if m.action == "add":
            decision = f"add {m.change_gpus} {add_when(m.in_weeks)}"
        elif m.action == "release":
            decision = f"release {m.change_gpus}"
        else:
            decision = "hold"
        rows.append((m.model, str(m.gpus), figure(m.forecast_mean_gpus),
                     f"{figure(m.forecast_low_gpus)} .. {figure(m.forecast_high_gpus)}", figure(m.peak_need_gpus),
                     decision, figure(m.growth_monthly_pct), figure(m.gpu_util_pct), figure(m.break_even_own_pct)))  # fmt: skip
    b.append(Block("table", rows=tuple(rows)))


def _spot(b: list[Block], f: Facts) -> None:
    sp = f.spot
    assert sp is not None
    b.append(Block("h2", "Spot capacity"))
    share = (f"{figure(sp.interruptible_on_spot_pct)}% of interruptible GPU-hours"
             if sp.interruptible_on_spot_pct is not None else "no interruptible work")  # fmt: skip
    b.append(Block("p", f"{counted(sp.nodes, 'spot node')}, {counted(sp.gpus, 'GPU')}: "
                   f"{figure(sp.gpu_hours)} GPU-hours held ({share}; "
                   f"critical work on spot {figure(sp.critical_gpu_hours_on_spot)} GPU-hours); "
                   f"{counted(sp.reclaims, 'reclaim')} ({', '.join(sp.reclaimed_nodes) or 'none'}), "
                   f"{counted(sp.jobs_evicted, 'job')} requeued, {figure(sp.gpu_hours_lost)} GPU-hours "
                   f"of work lost; prices from {sp.prices}."))  # fmt: skip
    rows = [("GPU model", "spot GPUs", "GPU-hours", f"on-demand {sp.currency}",
             f"spot {sp.currency}", f"saved {sp.currency}")]  # fmt: skip
    rows += [(m.model, str(m.gpus), figure(m.gpu_hours), _money(m.on_demand_cost),
              _money(m.spot_cost), _money(m.saved)) for m in sp.by_model]  # fmt: skip
    b.append(Block("table", rows=tuple(rows)))


def _money(x: float | None) -> str:
    return "" if x is None else f"{x:,.2f}"


def _img(b: list[Block], charts: dict[str, Path], name: str) -> None:
    if name in charts:
        b.append(Block("img", charts[name].name))


def markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for blk in blocks:
        if blk.kind == "h1":
            out.append(f"# {blk.text}\n")
        elif blk.kind == "h2":
            out.append(f"## {blk.text}\n")
        elif blk.kind in ("p", "note"):
            out.append(
                f"{'*' if blk.kind == 'note' else ''}{blk.text}{'*' if blk.kind == 'note' else ''}\n"
            )
        elif blk.kind == "parts":
            for group in _groups(blk.parts):
                out.append(f"**{MARK[group[0].origin]}** " + " ".join(p.text for p in group) + "\n")
        elif blk.kind == "items":
            out += [f"- **{MARK[p.origin]}** {p.text}" for p in blk.parts] + [""]
        elif blk.kind == "table":
            head, *rows = blk.rows
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "---|" * len(head))
            out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows] + [""]
        elif blk.kind == "img":
            out.append(f"![{blk.text}]({blk.text})\n")
    return "\n".join(out)


def _groups(parts: tuple[Part, ...]) -> list[list[Part]]:
    groups: list[list[Part]] = []
    for p in parts:
        if groups and groups[-1][0].origin == p.origin:
            groups[-1].append(p)
        else:
            groups.append([p])
    return groups


CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;font-size:90%}
.llm{border-left:4px solid #4c78a8;padding-left:.6em}.template{border-left:4px solid #bbb;padding-left:.6em}
.mark{font-size:75%;color:#666;margin-right:.4em}.note{color:#555;font-style:italic}img{max-width:100%}"""


def html_page(blocks: list[Block]) -> str:
    e = html.escape
    out = ["<!doctype html><html><head><meta charset='utf-8'>", f"<title>{e(blocks[0].text)}</title>",
           f"<style>{CSS}</style></head><body>"]  # fmt: skip
    for blk in blocks:
        if blk.kind in ("h1", "h2"):
            out.append(f"<{blk.kind}>{e(blk.text)}</{blk.kind}>")
        elif blk.kind == "p":
            out.append(f"<p>{e(blk.text)}</p>")
        elif blk.kind == "note":
            out.append(f"<p class='note'>{e(blk.text)}</p>")
        elif blk.kind == "parts":
            for group in _groups(blk.parts):
                origin = group[0].origin
                out.append(f"<p class='{origin}'><span class='mark'>{e(MARK[origin])}</span>"
                           + e(" ".join(p.text for p in group)) + "</p>")  # fmt: skip
        elif blk.kind == "items":
            out.append("<ul>" + "".join(f"<li class='{p.origin}'><span class='mark'>{e(MARK[p.origin])}</span>"
                                        f"{e(p.text)}</li>" for p in blk.parts) + "</ul>")  # fmt: skip
        elif blk.kind == "table":
            head, *rows = blk.rows
            out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in head) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
                       + "</table>")  # fmt: skip
        elif blk.kind == "img":
            out.append(f"<img src='{e(blk.text)}' alt='{e(blk.text)}'>")
    out.append("</body></html>")
    return "\n".join(out)
