"""``gpuwarden report`` through click's runner: files, marks, tokens, --facts-only, --dry-run,
Slack summary and upload against the Slack fake, bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_llm import Reply
from test_llm import GOOD, KEY

from gpuwarden.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "alerts"))
from fake_slack import BOT_TOKEN, FakeSlack  # noqa: E402

ENV = {"GPUWARDEN_LLM_BASE_URL": "", "GPUWARDEN_LLM_MODEL": "", "GPUWARDEN_LLM_API_KEY": "",
       "GPUWARDEN_SLACK_WEBHOOK_URL": "", "GPUWARDEN_SLACK_BOT_TOKEN": "", "GPUWARDEN_CONFIG": ""}  # fmt: skip


def run(week, tmp_path, *extra: str, env: dict | None = None):
    url, sched, audit = week
    args = ["report", "--store", url, "--since", "2025-11-24", "--out", str(tmp_path / "out"),
            "--scheduler-db", sched, "--audit", audit, *extra]  # fmt: skip
    return CliRunner().invoke(
        main, args, env={**ENV, "GPUWARDEN_GPU_HOUR_PRICE": "2.5", **(env or {})}
    )


def report_files(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "out").iterdir()
    return folder


def test_template_report_is_complete_and_marked(week, tmp_path):
    result = run(week, tmp_path)
    assert result.exit_code == 0, result.output
    folder = report_files(tmp_path)
    assert folder.name == "report-2025-11-24"
    md = (folder / "report.md").read_text()
    assert "# GPU cluster report: 2025-11-24 to 2025-11-30" in md
    assert "**[template]** This report covers" in md and "[checked LLM]**" not in md
    assert "No LLM configured" in md
    for section in ("## Recommendations", "## Availability", "## Failures and lead time",
                    "## GPUs at risk now", "## Scheduler, tenants and cost", "## Not in this report"):  # fmt: skip
        assert section in md
    assert "co2: no grid intensity set" in md  # left out and said so
    for chart in ("availability", "risk", "failures", "utilisation", "tenants"):
        assert (folder / f"{chart}.png").stat().st_size > 1000
        assert f"({chart}.png)" in md
    html = (folder / "report.html").read_text()
    assert "<table>" in html and "class='template'" in html
    assert json.loads((folder / "facts.json").read_text())["cost"]["total"] == 625.0


def test_llm_report_marks_checked_text_and_states_tokens(week, tmp_path, llm):
    llm.script = [Reply(GOOD, prompt_tokens=1000, completion_tokens=200)]
    env = {"GPUWARDEN_LLM_BASE_URL": llm.base_url, "GPUWARDEN_LLM_MODEL": "test-model",
           "GPUWARDEN_LLM_API_KEY": KEY, "GPUWARDEN_GRID_INTENSITY_G_PER_KWH": "400"}  # fmt: skip
    result = run(week, tmp_path, env=env)
    assert result.exit_code == 0, result.output
    folder = report_files(tmp_path)
    md = (folder / "report.md").read_text()
    assert "**[checked LLM]** Fleet availability was 94.64% this week" in md
    assert "1,200 tokens (1,000 prompt, 200 completion) in 1 LLM call" in md
    assert "test-model at http://127.0.0.1" in md and len(llm.requests) == 1
    for path in folder.iterdir():
        if path.suffix in (".md", ".html", ".json"):
            assert KEY not in path.read_text()
    assert KEY not in result.output


def test_facts_only_prints_the_document(week, tmp_path):
    result = run(week, tmp_path, "--facts-only")
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["version"] == 4 and facts["availability"]["fleet_availability_pct"] == 94.64
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_what_would_be_sent_and_sends_nothing(week, tmp_path, llm):
    env = {"GPUWARDEN_LLM_BASE_URL": llm.base_url, "GPUWARDEN_LLM_MODEL": "m"}
    result = run(week, tmp_path, "--dry-run", "--pseudonymise", env=env)
    assert result.exit_code == 0, result.output
    assert "LLM: would send to m at" in result.output and '"role": "system"' in result.output
    assert "gpu-a01" not in result.output.split("Slack webhook")[0]  # pseudonymised prompt
    assert '"type": "header"' in result.output
    assert not llm.requests and not (tmp_path / "out").exists()


def test_slack_summary_and_file_upload(week, tmp_path):
    slack = FakeSlack()
    try:
        env = {"GPUWARDEN_SLACK_WEBHOOK_URL": slack.url, "GPUWARDEN_SLACK_BOT_TOKEN": BOT_TOKEN,
               "GPUWARDEN_REPORT_SLACK_CHANNEL": "C0123", "GPUWARDEN_SLACK_API_URL": slack.api_url}  # fmt: skip
        result = run(week, tmp_path, env=env)
        assert result.exit_code == 0, result.output
        (message,) = slack.messages
        assert (
            message["blocks"][0]["text"]["text"] == "GPU cluster report: 2025-11-24 to 2025-11-30"
        )
        assert "94.64%" in json.dumps(message["blocks"])
        folder = report_files(tmp_path)
        assert {u["filename"] for u in slack.uploads} == {"report.html", "report.md"}
        for u in slack.uploads:
            assert u["channel"] == "C0123" and u["data"] == (folder / u["filename"]).read_bytes()
        assert BOT_TOKEN not in result.output and slack.url not in result.output
    finally:
        slack.close()


def test_a_wrong_bot_token_is_one_clear_error(week, tmp_path):
    slack = FakeSlack()
    try:
        env = {"GPUWARDEN_SLACK_BOT_TOKEN": "xoxb-wrong", "GPUWARDEN_REPORT_SLACK_CHANNEL": "C1",
               "GPUWARDEN_SLACK_API_URL": slack.api_url}  # fmt: skip
        result = run(week, tmp_path, env=env)
        assert result.exit_code == 1 and "invalid_auth" in result.output
        assert "xoxb-wrong" not in result.output
        assert (report_files(tmp_path) / "report.md").is_file()  # written before the upload
    finally:
        slack.close()


@pytest.mark.parametrize("since", ["last tuesday", "2025-13-01"])
def test_a_bad_date_is_a_usage_error(week, tmp_path, since):
    result = CliRunner().invoke(main, ["report", "--store", week[0], "--since", since], env=ENV)
    assert result.exit_code == 2 and "--since" in result.output


def test_a_period_ending_before_it_starts_is_one_line(week, tmp_path):
    result = run(week, tmp_path, "--until", "2025-11-20")
    assert result.exit_code == 1 and "must end after it starts" in result.output


def test_offline_report_of_make_demo(week, tmp_path):
    from gpuwarden.reports.build import offline_report
    from gpuwarden.store import open_store

    store = open_store(week[0])
    try:
        path = offline_report(store, tmp_path / "reports")
    finally:
        store.close()
    md = path.read_text()
    assert "Offline demo: template text only." in md and "**[template]** This report covers" in md


def test_the_comparison_reuses_last_weeks_facts(week, tmp_path):
    assert run(week, tmp_path, "--since", "2025-11-17", "--no-slack").exit_code == 0
    last = tmp_path / "out" / "report-2025-11-17" / "facts.json"
    data = json.loads(last.read_text())
    assert data["failures"]["failures"] == 0
    data["failures"]["failures"] = 9  # marked: a rebuilt comparison would say 0
    last.write_text(json.dumps(data))
    result = run(week, tmp_path, "--facts-only")
    changes = {c["metric"]: (c["before"], c["after"]) for c in json.loads(result.stdout)["changes"]}
    assert changes["failures"] == (9.0, 2.0)


def test_verdicts_read_from_the_store_serve_wrote_them_to(week, tmp_path):
    """A telemetry store without verdicts (serve --verdicts kept them elsewhere): --verdicts
    reads them from there, and the facts are those of the store that holds both."""
    import shutil
    import sqlite3

    url, sched, audit = week
    both = url.removeprefix("sqlite:///")
    telemetry = tmp_path / "telemetry.db"
    shutil.copy(both, telemetry)
    with sqlite3.connect(telemetry) as conn:
        conn.execute("DELETE FROM verdicts")
    args = ["report", "--since", "2025-11-24", "--facts-only", "--scheduler-db", sched,
            "--audit", audit, "--store", f"sqlite:///{telemetry}"]  # fmt: skip
    alone = CliRunner().invoke(main, args, env=ENV)
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.stdout)["risk"]["gpus"] == []
    split = CliRunner().invoke(main, [*args, "--verdicts", url], env=ENV)
    whole = CliRunner().invoke(main, [*args[:-1], url], env=ENV)
    assert split.exit_code == whole.exit_code == 0, split.output + whole.output
    facts, expected = json.loads(split.stdout), json.loads(whole.stdout)
    facts.pop("generated"), expected.pop("generated")
    assert facts == expected and [g["hostname"] for g in facts["risk"]["gpus"]] == ["gpu-b02"]


def test_no_progress_bar_under_cron_unless_asked(week, tmp_path):
    """The weekly report runs from cron or a timer: a progress bar there is noise in the log;
    one is drawn when stderr is a terminal, or with --progress."""
    quiet = run(week, tmp_path / "a")
    assert quiet.exit_code == 0, quiet.output
    assert "it/s" not in quiet.stderr and "day/s" not in quiet.stderr, quiet.stderr
    shown = run(week, tmp_path / "b", "--progress")
    assert shown.exit_code == 0, shown.output
    assert "day/s" in shown.stderr, shown.stderr
