"""Predicting an uncorrectable HBM error within 7 days on the real Calchas log (docs/real-data.md).

    .venv/bin/python bench/bench_calchas.py                       # ../shared/data/calchas/hbm_errors.csv
    .venv/bin/python bench/bench_calchas.py --data FILE --seeds 2 # another copy; fewer seeds

Reads the whole log through ``gpuwarden ingest --memory-errors``'s reader into a temporary
SQLite store and back (the path a user's log takes), builds one row per device (and per bank)
and day, splits 70/30 in time, and prints: what the events before each test-period
uncorrectable error could say about it, then precision / recall / F1 of the calibrated model,
the rule baseline and the published recipe, next to the paper's own figures. ``--data`` or
$GPUWARDEN_CALCHAS overrides the path (relative to the repository root by default).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

from gpuwarden.collectors.memory_errors import KIND, ingest_memory_errors, memory_error_frame
from gpuwarden.models import memory_error_eval as E
from gpuwarden.models import memory_errors as M
from gpuwarden.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".." / "shared" / "data" / "calchas" / "hbm_errors.csv"
LABEL = {"device": "server (device)", "bank": "bank"}


def load(path: Path):
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(str(Path(tmp) / "calchas.db"))
        try:
            log = ingest_memory_errors(store, path)
            errors = memory_error_frame(store.read_events(kinds=[KIND]))
        finally:
            store.close()
    return log, errors


def coverage_table(rows: list[E.Coverage]) -> str:
    lines = [
        "| level | test-period UE episodes | any earlier error on the unit | one in the 7 days "
        "before | a CE in the 7 days before | positive test rows with any history |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for c in rows:
        lines.append(
            f"| {LABEL[c.level]} | {c.episodes} | {c.with_any_before} | {c.with_any_7d} | "
            f"{c.with_ce_7d} | {c.positive_rows_with_history} of {c.positive_rows} |"
        )
    return "\n".join(lines)


def _f(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


def score_table(scores: list[E.Score]) -> str:
    lines = [
        "| level | test set | predictor | precision | recall | F1 | rows (positive) | chosen on train |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for level in M.LEVELS:
        p, r, f = M.PAPER[level]
        lines.append(
            f"| {LABEL[level]} | their data, their protocol | Calchas (published) | {p:.2f} | "
            f"{r:.2f} | {f:.2f} | - | - |"
        )
        for s in scores:
            if s.level == level:
                lines.append(
                    f"| {LABEL[level]} | {s.protocol} | {s.predictor} | {_f(s.precision)} | "
                    f"{_f(s.recall)} | {_f(s.f1)} | {s.rows} ({s.positives}) | {s.note} |"
                )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("GPUWARDEN_CALCHAS", DEFAULT)))
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..n-1 (model, forest, draws)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    log, errors = load(args.data)
    print(
        f"{args.data}: {len(errors)} errors ({', '.join(f'{n} {t}' for t, n in log.counts().items())}) "
        f"of {errors['uuid'].nunique()} accelerators, {log.bad_rows_total} bad lines\n"
    )
    seeds = tuple(range(args.seeds))
    covers, scores = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for level in M.LEVELS:
            table = M.observation_table(errors, level, progress=True)
            _, test, cut = M.time_split(table)
            covers.append(E.coverage(table, errors, level, cut))
            scores += E.evaluate_level(table, level, seeds=seeds)
    print(f"cut (70% of the observation days): {test['t'].min():.0f}\n")
    print(coverage_table(covers), "\n")
    print(score_table(scores))
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
