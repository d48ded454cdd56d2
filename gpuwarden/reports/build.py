"""One report, end to end: facts -> prose (LLM checked, or templates) -> files -> Slack.

    files = make_report(store, since, until, cfg, out=Path("reports"))

writes ``<out>/report-<first day>/`` with ``report.md``, ``report.html``, ``facts.json`` and the
charts, and returns their paths.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwarden.health import xid_table
from gpuwarden.reports import _atoms, _charts, render
from gpuwarden.reports.llm import LlmClient, LlmConfig, llm_config
from gpuwarden.reports.model import Facts
from gpuwarden.reports.pseudonym import Pseudonyms
from gpuwarden.reports.recommend import recommend
from gpuwarden.reports.writer import Prose, llm_prose, template_prose
from gpuwarden.store.base import ReadableStore


@dataclass
class ReportFiles:
    folder: Path
    markdown: Path
    html: Path
    facts: Path
    charts: dict[str, Path] = field(default_factory=dict)


def checker_index(f: Facts) -> _atoms.Index:
    """The facts indexed for the claim checker; Xid codes of the table in force count as known
    (the recommendations quote NVIDIA's action for them)."""
    return _atoms.index(f, set(xid_table().entries))


def prose_for(
    f: Facts,
    cfg: Mapping[str, Any],
    *,
    pseudonymise: bool = False,
    use_llm: bool = True,
    environ: Mapping[str, str] | None = None,
) -> tuple[Prose, LlmConfig | None]:
    recs = recommend(f)
    config = llm_config(cfg, os.environ if environ is None else environ) if use_llm else None
    if config is None:
        note = (
            "No LLM configured: template text only."
            if use_llm
            else "LLM not asked: template text only."
        )
        return template_prose(f, recs, note), None
    client = LlmClient(config)
    try:
        names = Pseudonyms.of(f) if pseudonymise else None
        return llm_prose(f, checker_index(f), recs, client, names), config
    finally:
        client.close()


def write_report(f: Facts, prose: Prose, out: Path, llm: LlmConfig | None) -> ReportFiles:
    folder = out / f"report-{f.period.since[:10]}"
    folder.mkdir(parents=True, exist_ok=True)
    charts = _charts.charts(f, folder)
    blocks = render.blocks(f, prose, charts, llm.describe() if llm else "templates")
    files = ReportFiles(
        folder, folder / "report.md", folder / "report.html", folder / "facts.json", charts
    )
    files.markdown.write_text(render.markdown(blocks))
    files.html.write_text(render.html_page(blocks))
    files.facts.write_text(f.model_dump_json(indent=2))
    return files


def offline_report(store: ReadableStore, out: Path, *, days: float = 7.0) -> Path:
    """The report of the ``days`` before the store's newest hour, template text only (no LLM,
    no Slack): what ``make demo`` writes. Returns the Markdown file's path."""
    from gpuwarden.reports.facts import build_facts

    newest = float(store.gpus()["last_ts"].max())
    until = newest // 3600 * 3600
    f = build_facts(store, until - days * 86400, until)
    return write_report(
        f, template_prose(f, recommend(f), "Offline demo: template text only."), out, None
    ).markdown
