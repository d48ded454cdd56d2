"""`gpuwarden evaluate closed-loop` through the main CLI: table, CSV and plots written."""

from __future__ import annotations

import pandas as pd
from click.testing import CliRunner

from gpuwarden.cli import main


def test_closed_loop_writes_the_table_and_the_plots(tmp_path):
    out = tmp_path / "cl"
    args = ["evaluate", "closed-loop", "--seeds", "2", "--days", "2", "--gpus", "16"]
    args += ["--sudden", "0,30%", "--accel", "200", "--jobs", "1", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "### Sudden share 0%" in result.output and "### Sudden share 30%" in result.output
    for arm in ("no prediction", "hard signals only", "rule baseline", "gpuwarden model"):
        assert f"| {arm} |" in result.output
    assert (out / "closed_loop.md").read_text() in result.output
    frame = pd.read_csv(out / "per_seed.csv")
    assert len(frame) == 2 * 2 * 4  # shares x seeds x arms
    assert "Model vs hard signals only at 30% sudden" in result.output
    assert set(frame["seed"]) == {101, 102}
    # the arms share the fleet: the same failures in each
    assert frame.groupby(["sudden_fraction", "seed"])["failures"].nunique().eq(1).all()
    for png in ("interruptions.png", "withheld.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_still_runs_on_its_own_and_lists_closed_loop(tmp_path):
    result = CliRunner().invoke(main, ["evaluate", "--help"])
    assert result.exit_code == 0
    assert "--store" in result.output and "closed-loop" in result.output
    # no subcommand: the original evaluation runs (and finds this empty store empty)
    from gpuwarden.store.sqlite import SqliteStore

    SqliteStore(tmp_path / "empty.db").close()  # there, and empty
    store = f"sqlite:///{tmp_path / 'empty.db'}"
    result = CliRunner().invoke(main, ["evaluate", "--store", store, "--out", str(tmp_path)])
    assert result.exit_code == 1 and "holds no telemetry" in result.output


def test_a_drifting_fleet_is_named_in_the_table(tmp_path):
    args = ["evaluate", "closed-loop", "--seeds", "1", "--days", "1", "--gpus", "16"]
    args += ["--sudden", "0", "--accel", "200", "--jobs", "1", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--thermal-drift", "1.5", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "; benign temperature drift 1.5 C (sd per GPU on core and HBM and per node" in (
        result.output
    )


def test_bad_options_are_one_line_errors(tmp_path):
    bad_options = (
        (["--gpus", "12"], "multiple of 8"),
        (["--sudden", "lots"], "--sudden"),
        (["--thermal-drift", "-1"], "--thermal-drift"),
    )
    for bad, word in bad_options:
        result = CliRunner().invoke(
            main, ["evaluate", "closed-loop", *bad, "--out", str(tmp_path), "--no-progress"]
        )
        assert result.exit_code == 1
        assert word in result.output and "Traceback" not in result.output


def test_threshold_moves_only_the_model_arms_line(tmp_path):
    args = ["evaluate", "closed-loop", "--seeds", "1", "--days", "2", "--gpus", "16"]
    args += ["--sudden", "0", "--accel", "200", "--jobs", "1", "--no-progress"]
    frames = {}
    for line in ("0.05", "0.95"):
        out = tmp_path / line
        result = CliRunner().invoke(main, [*args, "--threshold", line, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert f"; model line {line} (--threshold; otherwise " in result.output
        frames[line] = pd.read_csv(out / "per_seed.csv").set_index("arm")
    low, high = frames["0.05"], frames["0.95"]
    # the other arms do not read the line; the model arm withholds more at a lower one
    others = ["none", "hard", "rules"]
    pd.testing.assert_frame_equal(low.loc[others], high.loc[others])
    assert low.loc["model", "withheld_gpu_h"] > high.loc["model", "withheld_gpu_h"]
    bad = CliRunner().invoke(main, [*args, "--threshold", "1.5", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 1 and "--threshold must be between 0 and 1" in bad.output


def test_family_members_run_from_their_own_seeds(tmp_path):
    args = ["evaluate", "closed-loop", "--family", "--seeds", "1", "--days", "2", "--gpus", "16"]
    args += ["--sudden", "0.3", "--accel", "200", "--jobs", "1", "--no-progress"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 seed (60101, members of the randomized family, 8 GPUs a node)" in (result.output)
    frame = pd.read_csv(tmp_path / "per_seed.csv")
    assert set(frame["seed"]) == {60101} and len(frame) == 4
    drift = CliRunner().invoke(main, [*args, "--thermal-drift", "1", "--out", str(tmp_path)])
    assert drift.exit_code == 1 and "a family member draws its own drift" in drift.output


def test_one_seed_says_what_it_cannot_give(tmp_path):
    """One seed printed "1 seeds (101..101)", intervals "[nan%, nan%]", and "(nan% fewer)"
    where the hard-signals arm had nothing to cut."""
    args = ["evaluate", "closed-loop", "--seeds", "1", "--days", "2", "--gpus", "16",
            "--sudden", "30%", "--accel", "200", "--jobs", "1", "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Closed loop: 1 seed (101), " in result.output
    assert "nan" not in result.output and "e-4" not in result.output, result.output
    assert "95% interval of the all-failure cut: needs 2 seeds or more" in result.output
