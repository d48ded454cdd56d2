"""``gpuwarden energy advise`` over a real SQLite store: job classes from a real scheduler
database (its tasks' GPUs and times, its jobs' priority) or from the store's Kubernetes
assignments, and the errors a user meets when either is missing."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.errors import InputError
from gpuwarden.planning.energy_samples import from_store
from gpuwarden.scheduler.state import JobRow, SchedulerDB, TaskRow
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Assignment, Batch, GpuId

NOW = float(int(time.time() // 300) * 300)
START = NOW - 6 * 3600  # six hours of samples every 60 s
TASK_FROM, TASK_TO = NOW - 4 * 3600, NOW - 1 * 3600


def gpu(i: int) -> GpuId:
    return GpuId("n1", i, f"GPU-n1-{i}", f"0000:{i:02x}:00.0", "H100-80GB")


def write_store(path: Path) -> str:
    """n1's GPU 0 serves (250 W, 40%) and GPU 1 trains (650 W, 98%) from TASK_FROM to TASK_TO;
    both idle at 70 W, 0% outside it (idle samples must not count for either class)."""
    ts = np.arange(START, NOW, 60.0)
    busy = (ts >= TASK_FROM) & (ts < TASK_TO)
    frames = []
    for i, (w, u) in enumerate(((250.0, 40.0), (650.0, 98.0))):
        frames.append(pd.DataFrame({
            "ts": ts, "hostname": "n1", "gpu": i, "uuid": f"GPU-n1-{i}", "model": "H100-80GB",
            "power_w": np.where(busy, w, 70.0), "gpu_util_pct": np.where(busy, u, 0.0),
            "power_limit_w": 700.0}))  # fmt: skip
    url = f"sqlite:///{path}"
    with SqliteStore.from_url(url) as store:
        store.write_frame(pd.concat(frames, ignore_index=True))
    return url


def write_scheduler(path: Path) -> None:
    db = SchedulerDB(path)
    with db.transaction():
        for seq, (job, prio, g) in enumerate((("j-inf", "inference", 0), ("j-train", "training", 1)),
                                              start=1):  # fmt: skip
            db.insert_job(JobRow(job, seq, "a", job, {"priority": prio, "tasks": 1}, "succeeded",
                                 1, None, TASK_FROM, TASK_FROM, TASK_FROM, TASK_TO))  # fmt: skip
            db.upsert_task(TaskRow(job, 1, 0, "n1", [g], "exited", 1, 0, 1,
                                   started_at=TASK_FROM, ended_at=TASK_TO))  # fmt: skip
    db.close()


def test_advise_from_the_store_with_classes_from_the_scheduler_database(tmp_path):
    url = write_store(tmp_path / "g.db")
    write_scheduler(tmp_path / "s.db")
    r = CliRunner().invoke(main, ["energy", "advise", "--store", url, "--scheduler-db",
                                  str(tmp_path / "s.db")])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in r.output.splitlines() if line.startswith("| ") and "class" not in line}  # fmt: skip
    # 3 hours at 60 s, rolled up to 5-minute buckets: 36 per class, idle ones left out
    assert rows["inference"][:4] == ["36", "250", "40", "700"]
    assert rows["inference"][4] != "-"  # a cap for the memory-bound class
    assert rows["training"][:5] == ["36", "650", "98", "700", "-"]  # full clocks for training
    assert "scheduler database" in r.output


def test_advise_from_the_stores_kubernetes_namespaces(tmp_path):
    url = write_store(tmp_path / "g.db")
    with SqliteStore.from_url(url) as store:
        store.write_batch(Batch(TASK_FROM, assignments=(
            Assignment(TASK_FROM, gpu(0), "serving", "llm-0", "main"),
            Assignment(TASK_FROM, gpu(1), "research", "train-0", "main"))))  # fmt: skip
        store.write_batch(Batch(TASK_TO, assignments=(Assignment(TASK_TO, gpu(0)),
                                                      Assignment(TASK_TO, gpu(1)))))  # fmt: skip
        got = from_store(store, START, NOW)
    assert sorted(got.power) == ["research", "serving"]
    assert np.mean(got.power["serving"]) == pytest.approx(250.0)
    assert np.mean(got.util["research"]) == pytest.approx(98.0)
    assert got.board == {"research": 700.0, "serving": 700.0}
    (research, serving) = got.advice()
    assert research.cap_w is None and serving.cap_w is not None


def test_without_job_classes_the_command_says_what_to_give(tmp_path):
    url = write_store(tmp_path / "g.db")
    r = CliRunner().invoke(main, ["energy", "advise", "--store", url])
    assert r.exit_code == 1
    assert "no job ran on a GPU" in r.output and "--scheduler-db" in r.output
    r = CliRunner().invoke(main, ["energy", "advise", str(tmp_path / "g.db"), "--store", url])
    assert r.exit_code == 2 and "not both" in r.output
    with SqliteStore.from_url(url) as store, pytest.raises(InputError, match="no such"):
        from_store(store, START, NOW, scheduler_db=tmp_path / "none.db")


def test_a_gpu_of_unknown_board_power_takes_its_power_limit_or_is_refused(tmp_path):
    from gpuwarden.planning.energy_samples import classify

    frame = pd.DataFrame({"ts": [0.0, 300.0], "hostname": "n1", "gpu": 0, "uuid": "u",
                          "model": "G2", "power_w": [100.0, 120.0],
                          "gpu_util_pct": [30.0, 35.0], "power_limit_w": [300.0, np.nan]})  # fmt: skip
    spans = pd.DataFrame({"uuid": ["u"], "lo": [0.0], "hi": [np.inf], "cls": ["x"]})
    assert classify(frame, spans, ["uuid"], "test").board == {"x": 300.0}
    with pytest.raises(InputError, match="board power of G2 is unknown"):
        classify(frame.drop(columns="power_limit_w"), spans, ["uuid"], "test")
