"""Task output an agent ships with a sync, stored within two bounds.

An agent sends at most 64 KiB of each task's output per sync (``_agent_tasks.MAX_LOG_CHUNK``),
each chunk keyed by its byte offset in the task's log file on the node. The service keeps:

- per task attempt, the output up to byte ``MAX_TASK_LOG_BYTES`` (64 MiB) of that file: a chunk
  that starts at or past it is dropped, and one line at that offset says so;
- per sync, at most ``MAX_SYNC_LOG_BYTES`` (16 MiB, UTF-8) of text in all: a chunk past that
  budget is dropped and a line at its offset says how many bytes went missing there.

Chunks are dropped, never refused: a refused sync (413) would also lose its task reports, and
the agent resends the same body every second, so its node would fall silent and be written
off. The node keeps every byte in its agent's ``WORKDIR/logs/``. The API already bounds one
chunk (1 Mi characters) and the chunks of one sync (10,000).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuwarden.scheduler.state import SchedulerDB

#: Bytes of one task attempt's log file the service keeps (the first ones).
MAX_TASK_LOG_BYTES = 64 << 20
#: Bytes of log text one agent sync may store, all tasks together.
MAX_SYNC_LOG_BYTES = 16 << 20


def store_logs(db: SchedulerDB, node: str, chunks: Iterable[Mapping[str, Any]]) -> None:
    """Store ``chunks`` (each: job_id, attempt, task, offset, text) of tasks placed on
    ``node``, in order, within the bounds above."""
    budget = MAX_SYNC_LOG_BYTES
    for chunk in chunks:
        job_id, attempt, task = chunk["job_id"], int(chunk["attempt"]), int(chunk["task"])
        offset = int(chunk.get("offset") or 0)
        if offset >= MAX_TASK_LOG_BYTES:
            db.append_log(job_id, attempt, task, MAX_TASK_LOG_BYTES, _task_cut_note(node))
            continue
        # a lone surrogate cannot be stored in SQLite; the agent never sends one, and a sync
        # carrying one must not fail whole (and be resent, and fail again) for it
        data = chunk["text"].encode("utf-8", "replace")
        if len(data) > budget:
            db.append_log(job_id, attempt, task, offset, _sync_cut_note(len(data)))
            continue
        budget -= len(data)
        db.append_log(job_id, attempt, task, offset, data.decode("utf-8"))


def _task_cut_note(node: str) -> str:
    return (
        f"\n[gpuwarden: output past {MAX_TASK_LOG_BYTES >> 20} MiB is not kept by the "
        f"scheduler; the whole log is on {node} in the agent's WORKDIR/logs/]\n"
    )


def _sync_cut_note(size: int) -> str:
    return (
        f"\n[gpuwarden: {size} bytes of output dropped here: one agent sync stores at most "
        f"{MAX_SYNC_LOG_BYTES >> 20} MiB of log text; the whole log is in the agent's "
        "WORKDIR/logs/]\n"
    )


__all__ = ["MAX_SYNC_LOG_BYTES", "MAX_TASK_LOG_BYTES", "store_logs"]
