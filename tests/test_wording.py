"""What commands write for people: one node, never "1 nodes"; 1,680,000, never 1.68e+06; no
progress bar in a cron log."""

from __future__ import annotations

import time

from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.wording import counted, figure, number, plural


def test_counts_agree_with_their_nouns():
    assert counted(1, "node") == "1 node" and counted(0, "GPU") == "0 GPUs"
    assert counted(10_000, "GPU") == "10,000 GPUs" and counted(1.5, "GPU-hour") == "1.5 GPU-hours"
    assert plural(2, "was", "were") == "were" and plural(None, "GPU") == "GPUs"
    assert number(None) == "n/a" and number(1234.56) == "1,234.6"


def test_figures_are_never_in_exponent_form():
    assert figure(1_680_000.0) == "1,680,000" and figure(1_176_000.5) == "1,176,000.5"
    assert figure(0.7345) == "0.735" and figure(-0.0001) == "0" and figure(None) == ""


def test_a_single_gpu_machine_reads_in_the_singular(tmp_path):
    """A workstation with one GPU: the collector, serve and score speak of "1 GPU"."""
    store = f"sqlite:///{tmp_path / 's.db'}"
    sim = f"sim://?nodes=1&gpus=1&seed=3&step=60&start={int(time.time()) - 600}"
    r = CliRunner().invoke(main, ["collect", "--collector", sim, "--store", store,
                                  "--interval", "0", "--iterations", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "1 collection: 1 sample, " in r.output, r.output
    r = CliRunner().invoke(main, ["serve", "--once", "--no-collect", "--store", store,
                                  "--audit", str(tmp_path / "a.db")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert r.output.strip().endswith("1 GPU scored, 0 changed"), r.output


def test_progress_bars_follow_the_terminal(tmp_path):
    """Long commands draw progress bars at a terminal and not under cron (stderr a file),
    unless told: one option for ingest, train, evaluate, the closed loop, forecast and the
    report (the report's timer wrote its bar into the journal)."""
    import click

    from gpuwarden.cliutil import progress_option

    @click.command()
    @progress_option()
    def probe(progress: bool) -> None:
        click.echo(f"progress={progress}")

    runner = CliRunner()  # its stderr is no terminal
    assert runner.invoke(probe, []).output.strip() == "progress=False"
    assert runner.invoke(probe, ["--progress"]).output.strip() == "progress=True"
    assert runner.invoke(probe, ["--no-progress"]).output.strip() == "progress=False"
    for command in (["ingest"], ["train"], ["evaluate"], ["report"], ["plan", "forecast"],
                    ["evaluate", "closed-loop"], ["simulate"]):  # fmt: skip
        helptext = runner.invoke(main, [*command, "--help"]).output
        assert "default: when stderr is a terminal" in " ".join(helptext.split()), command
    # simulate drew its bar always: a cron-run simulation's log got every redraw
    store = f"sqlite:///{tmp_path / 'sim.db'}"
    sim = ["simulate", "--store", store, "--nodes", "1", "--gpus", "1", "--days", "0.1"]
    quiet = runner.invoke(main, sim)
    assert quiet.exit_code == 0 and "simulating" not in quiet.stderr, quiet.stderr
    assert "simulating" in runner.invoke(main, [*sim, "--seed", "2", "--progress"]).stderr


def test_the_missing_signal_warning_agrees_with_the_gpus_lacking_it():
    """The verb followed the fleet ("1 of 10 GPUs have", "1 of 1 GPU has ...: their risk")."""
    from gpuwarden.signals import SIGNALS, advice

    nvlink = next(s for s in SIGNALS if s.name == "NVLink errors")
    assert advice(nvlink, 1, 10).startswith("1 of 10 GPUs has no NVLink errors")
    assert ": its risk leaves it out" in advice(nvlink, 1, 1)
    many = advice(nvlink, 3, 10)
    assert many.startswith("3 of 10 GPUs have no") and ": their risk leaves it out" in many


def test_counts_of_one_in_planning_and_hooks():
    """ "over 1 jobs" in plan forecast's queue wait, "of 1 nodes" in the circuit breaker's
    refusal, "1 GPUs on 1 nodes" in the risk-loop demo, "wrote 1 rows" in billing and score."""
    from gpuwarden.planning.queuewait import WaitStats

    assert str(WaitStats("H100", 1, 0.5, 0.5)) == "H100: p50 0.50 h, p90 0.50 h over 1 job"
    assert str(WaitStats("H100", 2, 0.5, 0.5, waiting=1)).endswith("over 2 jobs, 1 still waiting")
