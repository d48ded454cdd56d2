"""The SQLite store when its file misbehaves: locked by another writer, read-only, disk full.

Each case must end in a clear ``StoreError`` naming the problem, never a traceback of SQLite's
own, with the file consistent (``PRAGMA integrity_check``), readable, and everything written
before still there. The other processes are real: a writer holding the lock, a reader or writer
that must respect file permissions (root without the capabilities that override them), a writer
whose files may not grow past a size (``RLIMIT_FSIZE``, the disk filling up as that process sees it).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwarden.errors import StoreError
from gpuwarden.store.sqlite import SqliteStore
from gpuwarden.telemetry import Batch, GpuId, Sample, samples_to_frame

GPUS = [GpuId(f"node{i // 8}", i % 8, f"GPU-{i:04d}") for i in range(16)]
T0 = 1_714_564_800.0


def batch(k: int) -> Batch:
    ts = T0 + 10 * k
    return Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 40.0 + k, "power_w": 200.0 + k})
                           for g in GPUS))  # fmt: skip


def filled(path: Path, batches: int = 5) -> None:
    with SqliteStore(path) as store:
        for k in range(batches):
            store.write_batch(batch(k))


def intact(path: Path, batches: int) -> None:
    """``path`` passes SQLite's own check and holds exactly the first ``batches`` batches."""
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute("SELECT ts, count(*), min(gpu_temp_c) FROM samples GROUP BY ts")
        assert rows.fetchall() == [(T0 + 10 * k, len(GPUS), 40.0 + k) for k in range(batches)]
    finally:
        conn.close()


# ---- locked by another writer ----------------------------------------------------------------

_HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO samples (ts, gpu_id, gpu_temp_c) VALUES (1, 1, 99.0)")
    print("locked", flush=True)
    sys.stdin.readline()  # hold the write lock until told
    conn.execute(sys.argv[2])
    print("done", flush=True)
    """
)


@pytest.fixture
def lock_holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A store of 5 batches, and another process holding its write lock mid-transaction."""
    path = tmp_path / "locked.db"
    filled(path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), "ROLLBACK"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    try:
        yield path, holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait()


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "done\n"


def test_writes_give_up_after_the_busy_timeout_naming_the_lock_and_reads_go_on(lock_holder):
    path, holder = lock_holder
    with SqliteStore(path, busy_timeout_s=0.3) as store:
        writes = [
            ("write_batch", lambda: store.write_batch(batch(5))),
            ("write_frame", lambda: store.write_frame(samples_to_frame(batch(5).samples))),
            ("write_events", lambda: store.write_events([])),
            ("compact", lambda: store.compact(T0 + 10 * 86400)),
        ]
        for what, write in writes:
            with pytest.raises(StoreError) as err:
                write()
            message = str(err.value)
            assert message.startswith(f"{what}: ") and "locked by another writer" in message
            assert "0.3 s" in message and "busy_timeout" in message
        # readers are not blocked by the writer (WAL) and see only what was committed
        assert len(store.read_samples()) == 5 * len(GPUS)
        assert len(store.gpus()) == len(GPUS)
        release(holder)
        store.write_batch(batch(5))  # the lock is gone: the same write goes through
    intact(path, 6)


def test_a_write_waits_for_a_lock_released_within_the_timeout(lock_holder):
    path, holder = lock_holder
    with SqliteStore(path, busy_timeout_s=60) as store:
        outcome: list[object] = []
        writer = threading.Thread(target=lambda: outcome.append(store.write_batch(batch(5))))
        writer.start()
        writer.join(0.3)
        assert writer.is_alive() and not outcome  # waiting, not failed
        release(holder)
        writer.join(30)
        assert outcome == [None]
    intact(path, 6)


# ---- read-only -------------------------------------------------------------------------------

_READER_WRITER = textwrap.dedent(
    """
    import json, sys
    from gpuwarden.errors import StoreError
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, GpuId, Sample
    out = {}
    try:
        store = SqliteStore(sys.argv[1])
    except StoreError as exc:
        print(json.dumps({"open": str(exc)}))
        raise SystemExit(0)
    out["rows"] = len(store.read_samples())
    out["gpus"] = len(store.gpus())
    g = GpuId("node9", 0, "GPU-new")
    for what, write in [
        ("write", lambda: store.write_batch(Batch(1.0, (Sample(1.0, g, {"gpu_temp_c": 1.0}),)))),
        ("compact", lambda: store.compact(2e9)),
    ]:
        try:
            write()
            out[what] = "done"
        except StoreError as exc:
            out[what] = str(exc)
    store.close()
    print(json.dumps(out))
    """
)


def without_root_powers() -> list[str]:
    """A prefix that runs a command unable to ignore file permissions: as root, without the
    capabilities that override them (``setpriv``, util-linux); as anyone else, nothing."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop root's power over file permissions"
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner,-linux_immutable"]


def read_and_write(path: Path) -> dict[str, object]:
    """Open ``path`` in another process that must respect its permissions, read, try writes."""
    done = subprocess.run(
        [*without_root_powers(), sys.executable, "-c", _READER_WRITER, str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("crashed", [False, True], ids=["closed", "left-by-a-crash"])
def test_a_read_only_store_is_read_and_refuses_writes_by_name(tmp_path: Path, crashed: bool):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "ro.db"
    if crashed:  # the writer was killed: its WAL holds committed rows not yet in the file
        script = f"{_FILL_AND_DIE}\nfill_and_die({str(path)!r}, 5)"
        assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == -9
        assert (folder / "ro.db-wal").stat().st_size > 0
    else:
        filled(path)
    for f in folder.iterdir():
        f.chmod(0o444)
    folder.chmod(0o555)  # no file may be made or removed here either
    try:
        before = {f.name: f.read_bytes() for f in folder.iterdir()}
        got = read_and_write(path)
        assert got.get("open") is None, got
        assert got["rows"] == 5 * len(GPUS) and got["gpus"] == len(GPUS)
        for what in ("write", "compact"):
            message = str(got[what])
            assert "read-only" in message and str(path) in message, message
            assert "nothing of this write was stored" in message, message
        assert {f.name: f.read_bytes() for f in folder.iterdir()} == before  # untouched
    finally:
        folder.chmod(0o755)
        for f in folder.iterdir():
            f.chmod(0o644)
    intact(path, 5)


_FILL_AND_DIE = textwrap.dedent(
    """
    import os
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, GpuId, Sample
    def fill_and_die(path, batches):
        store = SqliteStore(path)
        gpus = [GpuId("node%d" % (i // 8), i % 8, "GPU-%04d" % i) for i in range(16)]
        for k in range(batches):
            ts = 1_714_564_800.0 + 10 * k
            samples = tuple(Sample(ts, g, {"gpu_temp_c": 40.0 + k, "power_w": 200.0 + k})
                            for g in gpus)
            store.write_batch(Batch(ts, samples))
        os.kill(os.getpid(), 9)
    """
)


# ---- the disk fills up -----------------------------------------------------------------------

_FILL_UP = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from gpuwarden.errors import StoreError
    from gpuwarden.store.sqlite import SqliteStore
    from gpuwarden.telemetry import Batch, GpuId, Sample, samples_to_frame
    path, how = sys.argv[1], sys.argv[2]
    gpus = [GpuId("node%d" % (i // 8), i % 8, "GPU-%04d" % i) for i in range(16)]
    def batch(k):
        ts = 1_714_564_800.0 + 10 * k
        return Batch(ts, tuple(Sample(ts, g, {"gpu_temp_c": 40.0 + k, "power_w": 200.0 + k})
                               for g in gpus))
    store = SqliteStore(path, chunk_rows=len(gpus))
    for k in range(5):
        store.write_batch(batch(k))
    if how == "rlimit":
        # the files of this process may not grow more than 64 KiB past their size now: the
        # disk is full as far as it can tell (EFBIG instead of SIGXFSZ's default death)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        biggest = max(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
        resource.setrlimit(resource.RLIMIT_FSIZE, (biggest + 65536, resource.RLIM_INFINITY))
    written, errors = 5, []
    for step in range(100_000):
        try:
            if step % 2:
                store.write_batch(batch(written))
                wrote = 1
            else:  # a bulk load of two batches, one chunk (one commit) per batch's rows
                both = batch(written).samples + batch(written + 1).samples
                store.write_frame(samples_to_frame(both))
                wrote = 2
        except StoreError as exc:
            errors.append(str(exc))
            break
        written += wrote
    reads = len(store.read_samples())
    print(json.dumps({"written": written, "errors": errors, "reads": reads}), flush=True)
    """
)


def fill_up(path: Path, how: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _FILL_UP, str(path), how],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def check_full(path: Path, got: dict) -> None:
    (message,) = got["errors"]
    assert str(path) in message and "the disk is full or failing" in message, message
    stored = got["reads"] // len(GPUS)  # what the failed process itself still reads
    assert got["reads"] % len(GPUS) == 0 and stored in (got["written"], got["written"] + 1)
    if message.startswith("write_frame") and stored > got["written"]:
        # its first chunk was committed before the second failed, and the message says so
        assert f"the first {len(GPUS)} of its {2 * len(GPUS)} rows were stored" in message
    else:
        assert message.startswith(("write_batch", "write_frame")) and stored == got["written"]
        assert "nothing of this write was stored" in message, message
    intact(path, stored)  # consistent, and exactly what was acknowledged is there
    with SqliteStore(path) as store:  # room again: the store takes writes
        store.write_batch(batch(stored))
    intact(path, stored + 1)


def test_a_full_disk_fails_the_write_clearly_and_keeps_the_file_consistent(tmp_path: Path):
    path = tmp_path / "full.db"
    check_full(path, fill_up(path, "rlimit"))


def test_a_full_tmpfs_fails_the_write_clearly_and_keeps_the_file_consistent(tmp_path: Path):
    # a real ENOSPC (SQLITE_FULL rather than the RLIMIT's I/O error), where mounting is allowed
    mount = tmp_path / "tiny"
    mount.mkdir()
    tried = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                           capture_output=True, text=True)  # fmt: skip
    if tried.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({tried.stderr.strip()}); the RLIMIT case ran")
    try:
        path = mount / "full.db"
        got = fill_up(path, "disk")
        copy = tmp_path / "copy.db"  # check it off the full disk, where writes fit again
        for suffix in ("", "-wal"):
            if (mount / f"full.db{suffix}").exists():
                copy.with_name(f"copy.db{suffix}").write_bytes(
                    (mount / f"full.db{suffix}").read_bytes()
                )
        check_full(
            copy, {**got, "errors": [e.replace(str(path), str(copy)) for e in got["errors"]]}
        )
    finally:
        subprocess.run(["umount", str(mount)], check=True)
