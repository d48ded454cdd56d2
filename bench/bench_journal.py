"""Kernel logs from the journal: how fast ``ingest --kernel-log`` reads each form of it, against
the same entries as a text log.

    .venv/bin/python bench/bench_journal.py                  # 200,000 entries, median of 3
    .venv/bin/python bench/bench_journal.py --entries 1000000 --repeat 1

A node's whole journal, as a shipper forwards it: one entry in ``--kernel-share`` is the
kernel's (1 in 20 of those an Xid line of the real H100 log, tests/data/kmsg/real/), the rest
other services' lines. Written once per form, then loaded into a fresh SQLite file each time:

- "short-iso text": the same entries as ``journalctl -o short-iso-precise`` prints them, read by
  the text parser (the baseline: the ratio column is each form's time over its);
- "json": ``journalctl -o json`` (lines holding no ``NVRM``/``SXid`` are counted, not decoded);
- "export": ``journalctl -o export``, every entry decoded;
- "journal directory": a real journal written by ``systemd-journal-remote`` (when installed;
  it rotates into archived files as it fills), read through ``journalctl --file`` of each,
  whose matches pick the kernel's entries.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuwarden.collectors.journal import export_entries
from gpuwarden.ingest import ingest_kernel_log
from gpuwarden.store.sqlite import SqliteStore

XID = (
    "NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of "
    "waiting for RPC response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."
)
T0 = 1_740_327_858_000_000


def entries(n: int, kernel_share: float) -> list[dict[str, str]]:
    every = max(1, round(1 / kernel_share))
    out = []
    for k in range(n):
        kernel = k % every == 0
        message = (
            XID
            if kernel and (k // every) % 20 == 0
            else "ena 0000:00:05.0 eth0: Link is Up"
            if kernel
            else f"Started session {k} of user slurm."
        )
        out.append(
            {
                "__REALTIME_TIMESTAMP": str(T0 + k * 1000),
                "_HOSTNAME": "node7",
                "_TRANSPORT": "kernel" if kernel else "journal",
                "SYSLOG_IDENTIFIER": "kernel" if kernel else "systemd-logind",
                "PRIORITY": "4" if kernel else "6",
                "MESSAGE": message,
            }
        )
    return out


def text(rows: list[dict[str, str]]) -> str:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    return "".join(
        f"{(epoch + timedelta(microseconds=int(r['__REALTIME_TIMESTAMP']))).isoformat()} "
        f"{r['_HOSTNAME']} {r['SYSLOG_IDENTIFIER']}: {r['MESSAGE']}\n"
        for r in rows
    )


def load(path: Path, repeat: int) -> tuple[float, int]:
    times, stored = [], 0
    for _ in range(repeat):
        store = SqliteStore()
        t0 = time.perf_counter()
        stored = ingest_kernel_log(store, path).rows_stored
        times.append(time.perf_counter() - t0)
        store.close()
    return statistics.median(times), stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--kernel-share", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = entries(args.entries, args.kernel_share)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "k.txt").write_text(text(rows))
        (d / "k.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "k.export").write_bytes(export_entries(rows))
        forms = [("short-iso text", d / "k.txt"), ("json", d / "k.json")]
        forms.append(("export", d / "k.export"))
        remote = shutil.which("systemd-journal-remote", path="/lib/systemd:/usr/lib/systemd")
        if remote and shutil.which("journalctl"):
            (d / "journal").mkdir()  # it rotates into archived files as it fills
            out = d / "journal" / "k.journal"
            subprocess.run([remote, f"--output={out}", str(d / "k.export")], check=True)
            forms.append(("journal directory", d / "journal"))
        print(
            f"{args.entries:,} entries, {args.kernel_share:.0%} the kernel's; median of "
            f"{args.repeat}"
        )
        print("| form | seconds | entries/s | Xids stored | time / text's |")
        print("|---|---:|---:|---:|---:|")
        base = None
        for name, path in forms:
            seconds, stored = load(path, args.repeat)
            base = base or seconds
            print(
                f"| {name} | {seconds:.2f} | {args.entries / seconds:,.0f} | {stored:,} | "
                f"{seconds / base:.2f} |"
            )


if __name__ == "__main__":
    main()
