"""`gpuwarden train / score / evaluate`, invoked directly through click's CliRunner: outputs in
table, CSV and JSON, a failures file, plots, and one clear line for each user mistake."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
from click.testing import CliRunner
from modelkit import T0

from gpuwarden.models.artifact import save_model
from gpuwarden.models.cli import evaluate, score, train
from gpuwarden.store.sqlite import SqliteStore


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    from gpuwarden.models.simdata import fleet_spec
    from gpuwarden.sim import Fleet

    path = tmp_path_factory.mktemp("cli") / "fleet.db"
    fleet = Fleet(fleet_spec(nodes=4, days=21.0, accel=120.0, seed=31, start_ts=T0))
    with SqliteStore(path) as store:
        for chunk in fleet.chunks(progress=False):
            store.write_frame(chunk.samples)
            store.write_events(chunk.events)
        store.write_failures(fleet.failures)
    return f"sqlite:///{path}", fleet


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    return str(save_model(tiny_model, tmp_path_factory.mktemp("m") / "tiny"))


def run(cmd, args):
    result = CliRunner().invoke(cmd, args, catch_exceptions=False)
    return result


def test_train_writes_a_model_folder(store_url, tmp_path):
    url, _ = store_url
    out = tmp_path / "mine"
    result = run(train, ["--store", url, "--out", str(out), "--no-progress", "--step", "3h"])
    assert result.exit_code == 0, result.output
    assert "trained on" in result.output and (out / "model.skops").is_file()
    card = json.loads((out / "model_card.json").read_text())
    assert card["training_data"]["store"] == url and card["options"]["step_h"] == 3


def test_train_from_scratch_with_draws_writes_their_mean(store_url, tmp_path):
    url, _ = store_url
    out = tmp_path / "drawn"
    args = ["--store", url, "--out", str(out), "--no-progress", "--step", "3h"]
    result = run(train, [*args, "--from-scratch", "--draws", "3"])
    assert result.exit_code == 0, result.output
    assert "trained from scratch" in result.output
    card = json.loads((out / "model_card.json").read_text())
    assert card["options"]["draws"] == 3 and "mean log-odds of 3 draws" in card["estimator"]
    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.estimator import MeanOfDraws

    assert len(load_model(out).estimator.estimator_.members_) == 3
    assert isinstance(load_model(out).estimator.estimator_, MeanOfDraws)
    clash = CliRunner().invoke(train, [*args, "--draws", "3"])
    assert clash.exit_code != 0 and "--draws grows trees from nothing" in clash.output
    assert "not in the range x>=1" in CliRunner().invoke(train, [*args, "--draws", "0"]).output


def test_train_with_a_failures_file_and_until(store_url, tmp_path):
    url, fleet = store_url
    rows = [
        {
            "timestamp": f.ts,
            "hostname": f.gpu.hostname,
            "gpu": f.gpu.index,
            "UUID": f.gpu.uuid,
            "kind": f.kind,
        }
        for f in fleet.failures
    ]
    path = tmp_path / "failures.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with open(path, "a") as fh:
        fh.write("not-a-time,node000,0,GPU-x,hbm\n")  # a bad row is reported and skipped
    until = pd.Timestamp(T0 + 20 * 86400, unit="s", tz="UTC").isoformat()
    result = CliRunner().invoke(
        train,
        [
            "--store",
            url,
            "--failures",
            str(path),
            "--until",
            until,
            "--out",
            str(tmp_path / "m"),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert ":" in result.stderr and "skipped" in result.stderr
    card = json.loads((tmp_path / "m" / "model_card.json").read_text())
    assert card["training_data"]["end"] <= T0 + 20 * 86400 + 3600


def test_score_table_csv_json(store_url, model_dir, tmp_path):
    url, _ = store_url
    table = run(score, ["--store", url, "--model", model_dir])
    assert table.exit_code == 0, table.output
    # warnings (here: this busier fleet logs more errors than the tiny model's) go to stderr
    assert table.stdout.splitlines()[0].split()[:5] == ["host", "gpu", "uuid", "risk", "state"]
    assert "GPUs at" in table.output
    csv = run(score, ["--store", url, "--model", model_dir, "--format", "csv"])
    frame = pd.read_csv(io.StringIO(csv.stdout))
    assert list(frame.columns) == [
        "at",
        "hostname",
        "gpu",
        "uuid",
        "model",
        "risk",
        "state",
        "reasons",
    ]
    assert frame["uuid"].is_unique
    out = tmp_path / "risk.json"
    js = run(
        score,
        ["--store", url, "--model", model_dir, "--output", str(out), "--at", str(T0 + 15 * 86400)],
    )
    assert js.exit_code == 0
    rows = json.loads(out.read_text())
    assert {r["at"] for r in rows} == {T0 + 15 * 86400}


def test_score_backtest_writes_every_step(store_url, model_dir, tmp_path):
    url, _ = store_url
    out = tmp_path / "risk.csv"
    start = pd.Timestamp(T0 + 10 * 86400, unit="s", tz="UTC").isoformat()
    result = run(
        score,
        [
            "--store",
            url,
            "--model",
            model_dir,
            "--start",
            start,
            "--end",
            str(T0 + 11 * 86400),
            "--step",
            "6h",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert sorted(frame["at"].unique()) == [T0 + 10 * 86400 + k * 21600 for k in range(5)]


def test_evaluate_prints_both_and_writes_plots(store_url, model_dir, tmp_path):
    url, _ = store_url
    out = tmp_path / "ev"
    result = run(
        evaluate,
        ["--store", url, "--model", model_dir, "--out", str(out), "--start", str(T0 + 8 * 86400)],
    )
    assert result.exit_code == 0, result.output
    assert "ALL with precursors" in result.output and "ALL sudden" in result.output
    assert "false flags per 1,000 GPU-days" in result.output
    (level,) = [x for x in result.output.splitlines() if x.startswith("Error level")]
    assert "sbe_per_day_7d@0.75 " in level and "(warns above " in level
    for name in (
        "pr_curve.png",
        "reliability.png",
        "lead_time.png",
        "tradeoff.png",
        "failures.csv",
    ):
        assert (out / name).stat().st_size > 1000 or name == "failures.csv"
    assert (out / "pr_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("cmd", "args", "message"),
    [
        (score, ["--store", "sqlite:///:memory:"], "no telemetry"),
        (score, ["--at", "yesterday-ish", "--store", "x.db"], "is not a time"),
        (score, ["--end", "0"], "a backtest needs --start"),
        (score, ["--step", "-1h", "--start", "0", "--end", "1", "--store", "x.db"], "duration"),
        (train, ["--out", "x"], "--store"),
        (evaluate, ["--store", "sqlite:///:memory:", "--step", "90m"], "whole hours"),
    ],
)
def test_user_mistakes_are_one_line(cmd, args, message, model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from gpuwarden.store.sqlite import SqliteStore

    SqliteStore(tmp_path / "x.db").close()  # a store that is there: the mistake is the option
    if cmd is not train:
        args = [*args, "--model", model_dir]
    result = CliRunner().invoke(cmd, args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_missing_model_is_a_clear_error(store_url, tmp_path):
    url, _ = store_url
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(score, ["--store", url, "--model", str(tmp_path / "empty")])
    assert result.exit_code == 1 and "no model at" in result.output


@pytest.fixture
def card_line_after():
    from gpuwarden.health import use_at_risk_threshold

    yield
    use_at_risk_threshold(None)


def test_the_at_risk_threshold_setting_moves_the_line_over_the_card(
    store_url, model_dir, monkeypatch, card_line_after
):
    """``at_risk_threshold`` (here from the environment) overrides the card's line for every
    command: a fleet noisier than the training fleets needs a higher one (wave 23)."""
    from gpuwarden.cli import main

    url, _ = store_url
    args = ["score", "--store", url, "--model", model_dir, "--format", "csv"]
    card = pd.read_csv(io.StringIO(CliRunner().invoke(main, args).stdout))
    below = card[(card["state"] == "ok") & (card["risk"] > 0)]
    assert len(below), "the fixture's fleet has no GPU under the card's line"
    line = float(below["risk"].min()) - 5e-5  # the CSV rounds risks to 4 places
    monkeypatch.setenv("GPUWARDEN_AT_RISK_THRESHOLD", f"{line!r}")
    moved = pd.read_csv(io.StringIO(CliRunner().invoke(main, args).stdout))
    assert (moved["uuid"] == card["uuid"]).all() and (moved["risk"] == card["risk"]).all()
    risky = moved["state"] != "unhealthy"
    assert (moved.loc[risky & (moved["risk"] >= line), "state"] == "at-risk").all()
    assert (moved["state"] == "at-risk").sum() > (card["state"] == "at-risk").sum()
    for bad in ("1.5", "0", "high"):
        monkeypatch.setenv("GPUWARDEN_AT_RISK_THRESHOLD", bad)
        result = CliRunner().invoke(main, args)
        assert result.exit_code != 0 and "at_risk_threshold" in result.output, result.output
        assert "Traceback" not in result.output
