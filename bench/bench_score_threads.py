"""Scoring on busy cores: OpenMP's default threads against the ``score_threads`` setting.

    .venv/bin/python bench/bench_score_threads.py              # 32, 1,000 and 10,000 GPUs
    .venv/bin/python bench/bench_score_threads.py --rows 32,10000 --repeats 5

The rows are the feature rows of a small simulated fleet, repeated to each size. Each size is
scored (the shipped model's risk) ``--repeats`` times with OpenMP's default threads and with the
setting's one thread, on idle cores and then with one busy process per core beside it (what a
shared host, or a container whose CPU quota is below the cores it sees, looks like to OpenMP).
It prints the mean milliseconds and the ratio default / one thread: over 1 means the setting
is faster. Means, not minima: the stalls come and go, and a serve tick pays the mean.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np


def _burn(stop) -> None:  # type: ignore[no-untyped-def]
    # as `yes > /dev/null`: small writes, in and out of the kernel, never sleeping
    fd = os.open(os.devnull, os.O_WRONLY)
    block = b"y\n" * 4096
    while not stop.is_set():
        for _ in range(1000):
            os.write(fd, block)


def _mean_ms(score, X, repeats: int, limited: bool) -> float:  # type: ignore[no-untyped-def]
    from gpuwarden import tuning

    tuning.apply_score_threads(1 if limited else 0)
    took = []
    for _ in range(repeats):
        t = time.perf_counter()
        with tuning.scoring_threads():
            score(X)
        took.append(time.perf_counter() - t)
    return 1000.0 * float(np.mean(took))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="32,1000,10000", help="GPUs scored at once")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if os.environ.get("OMP_NUM_THREADS"):
        raise SystemExit("unset OMP_NUM_THREADS: it overrides both arms")

    from gpuwarden.models.artifact import load_model
    from gpuwarden.models.features import compute_features, rows_at
    from gpuwarden.models.simdata import fleet_spec, simulate_panel

    model = load_model()
    panel = simulate_panel(fleet_spec(nodes=4, days=10.0, accel=50.0, seed=5)).panel
    _, X = compute_features(panel, rows_at(panel, np.arange(panel.shape[0] - 48, panel.shape[0])))
    sizes = [int(s) for s in args.rows.split(",")]
    cores = os.cpu_count() or 1
    print(f"{cores} cores; the shipped model's risk, mean of {args.repeats}")
    print("| cores | GPUs | OpenMP default, ms | one thread, ms | default / one |")
    print("|---|---:|---:|---:|---:|")
    for busy in (False, True):
        stop = mp.Event()
        burners = [mp.Process(target=_burn, args=(stop,)) for _ in range(cores if busy else 0)]
        for p in burners:
            p.start()
        try:
            for n in sizes:
                Xn = X.iloc[np.resize(np.arange(len(X)), n)]
                model.risk(Xn)  # warm
                default = _mean_ms(model.risk, Xn, args.repeats, limited=False)
                one = _mean_ms(model.risk, Xn, args.repeats, limited=True)
                label = f"busy ({cores} burners)" if busy else "idle"
                print(f"| {label} | {n:,} | {default:,.1f} | {one:,.1f} | {default / one:.2f} |")
        finally:
            stop.set()
            for p in burners:
                p.join()


if __name__ == "__main__":
    main()
