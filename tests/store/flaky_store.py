"""A store that fails on demand, for the spool's tests: SQLite underneath, and while ``down()``
says so every write raises ``StoreError`` as a server that is away would. ``delay_s`` slows each
write (a replay to kill in the middle of); ``writes`` records what was written, in order."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from gpuwarden.errors import StoreError
from gpuwarden.store.sqlite import SqliteStore


class FlakyStore:
    def __init__(
        self,
        inner: SqliteStore,
        *,
        down: Callable[[], bool] = lambda: False,
        delay_s: float = 0.0,
        refuse: Callable[[str, Any], Exception | None] = lambda method, payload: None,
    ) -> None:
        self.inner = inner
        self.url = inner.url
        self.down = down
        self.delay_s = delay_s
        self.refuse = refuse
        self.writes: list[tuple[str, Any]] = []
        self.attempts = 0

    def _write(self, method: str, payload: Any) -> Any:
        self.attempts += 1
        if self.down():
            raise StoreError(f"{self.url}: connection refused (the test took it down)")
        problem = self.refuse(method, payload)
        if problem is not None:
            raise problem
        if self.delay_s:
            time.sleep(self.delay_s)
        out = getattr(self.inner, method)(payload)
        self.writes.append((method, payload))
        return out

    def write_batch(self, batch: Any) -> None:
        self._write("write_batch", batch)

    def write_events(self, events: Iterable[Any]) -> int:
        return self._write("write_events", list(events))

    def write_failures(self, failures: Iterable[Any]) -> int:
        return self._write("write_failures", list(failures))

    def write_rejections(self, rejections: Iterable[Any]) -> int:
        return self._write("write_rejections", list(rejections))

    def write_verdicts(self, verdicts: Iterable[Any]) -> int:
        return self._write("write_verdicts", list(verdicts))

    def write_frame(self, frame: Any, *, progress: bool = False) -> int:
        return self._write("write_frame", frame)

    def compact(self, now: float) -> None:
        self.inner.compact(now)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("read_") or name in ("gpus", "mig_instances"):
            return getattr(self.inner, name)
        raise AttributeError(name)

    def close(self) -> None:
        self.inner.close()
