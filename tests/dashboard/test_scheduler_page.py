"""The Scheduler page against a small HTTP server on 127.0.0.1 that answers in the bundled
scheduler's contract (fixed JSON, bearer token checked): the numbers the page shows."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pytest
from known_fleet import require_extra

require_extra("streamlit", "altair")
import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from gpuwarden.dashboard import app as app_module  # noqa: E402
from gpuwarden.dashboard._scheduler_page import week_start  # noqa: E402

APP = Path(app_module.__file__)
TOKEN = "admin-t0ken"
NOW = pd.Timestamp("2026-12-02 12:00", tz="UTC").timestamp()  # a Wednesday
MONDAY = pd.Timestamp("2026-11-30 00:00", tz="UTC").timestamp()


def job(job_id: str, tenant: str, state: str, priority: str, **kw: Any) -> dict[str, Any]:
    return {
        "job_id": job_id, "tenant": tenant, "name": job_id, "priority": priority,
        "interruptible": kw.get("interruptible", False), "state": state, "attempt": 1,
        "tasks": kw.get("tasks", 1), "gpus_per_task": kw.get("gpus", 1),
        "gpu_milli": kw.get("milli", 1000), "mig_profile": kw.get("mig"), "command": ["train.py"],
        "submitted_at": kw.get("submitted", NOW - 3600), "started_at": None, "ended_at": None,
        "exit_code": None, "reason": "", "last_checkpoint_at": None, "preemptions": 0,
        "placement": [],
    }  # fmt: skip


JOBS = [
    job("j1", "team-a", "queued", "training", tasks=2, gpus=4, submitted=NOW - 5 * 3600),
    job("j2", "team-a", "queued", "training", gpus=8, submitted=NOW - 3600),
    job("j3", "team-b", "queued", "batch", gpus=1, milli=250, submitted=NOW - 1800),
    job("j4", "team-a", "running", "training", tasks=2, gpus=8),
    job("j5", "team-b", "running", "inference", gpus=1, milli=500, interruptible=True),
    job("j6", "team-b", "checkpointing", "batch", gpus=2, interruptible=True),
    # MIG instances count their compute slices out of 7, as the scheduler bills them
    job("j7", "team-c", "running", "inference", mig="1g.10gb"),
    job("j8", "team-c", "queued", "batch", tasks=2, mig="3g.40gb", submitted=NOW - 600),
]
QUOTA = [
    {"tenant": "team-a", "gpus": 32, "gpu_memory_mib": 0, "guaranteed_gpus": 8,
     "used_gpus": 16, "used_gpu_memory_mib": 0},
    {"tenant": "team-b", "gpus": 10, "gpu_memory_mib": 0, "guaranteed_gpus": 2,
     "used_gpus": 2.5, "used_gpu_memory_mib": 0},
]  # fmt: skip
BILLING = [
    {"tenant": "team-a", "job_id": "j4", "name": "j4", "gpu_hours": 320.0},
    {"tenant": "team-a", "job_id": "j0", "name": "j0", "gpu_hours": 12.5},
    {"tenant": "team-b", "job_id": "j5", "name": "j5", "gpu_hours": 0.25},
    {"tenant": "team-b", "job_id": "j6", "name": "j6", "gpu_hours": 3 / 7},
]
AUDIT = [
    {"at": NOW - 600, "actor": "scheduler", "action": "preempt", "job_id": "j6", "node": "n2",
     "gpu": 3, "reason": "inference job j5 needs the GPU"},
    {"at": NOW - 500, "actor": "scheduler", "action": "place", "job_id": "j5", "node": "n2",
     "gpu": 3, "reason": ""},
    {"at": MONDAY - 3600, "actor": "scheduler", "action": "preempt", "job_id": "j0", "node": "n1",
     "gpu": 0, "reason": "last week"},
    {"at": NOW - 60, "actor": "admin", "action": "preempt", "job_id": "j4", "node": "n1",
     "gpu": 1, "reason": "GPU at risk"},
]  # fmt: skip


class FakeScheduler:
    """A scheduler API in a thread: fixed answers, the token checked, every request kept."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.audit = AUDIT  # newest first, as /v1/audit gives them; ?limit= applies
        self.pages = True  # False: a scheduler from before audit paging (no ids, no filters)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                owner.requests.append((parts.path, parse_qs(parts.query)))
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._send(401, {"detail": "missing or wrong bearer token"})
                body = {"/v1/jobs": JOBS, "/v1/quota": QUOTA, "/v1/billing": BILLING,
                        "/v1/audit": owner.audit_page(parse_qs(parts.query))}.get(parts.path)  # fmt: skip
                if body is None:
                    return self._send(404, {"detail": "no such path"})
                self._send(200, body)

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def audit_page(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        """``/v1/audit`` as the scheduler answers it: ids counting up from the oldest row, and
        ``action``, ``since`` and ``before_id`` applied; an old one ignores them all."""
        limit = int(query.get("limit", ["100"])[0])
        if not self.pages:
            return self.audit[:limit]
        rows = [{"id": len(self.audit) - i, **r} for i, r in enumerate(self.audit)]
        if "action" in query:
            rows = [r for r in rows if r["action"] == query["action"][0]]
        if "since" in query:
            rows = [r for r in rows if r["at"] >= float(query["since"][0])]
        if "before_id" in query:
            rows = [r for r in rows if r["id"] < int(query["before_id"][0])]
        return rows[:limit]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scheduler() -> Iterator[FakeScheduler]:
    st.cache_data.clear()
    server = FakeScheduler()
    yield server
    server.close()
    st.cache_data.clear()


def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> AppTest:
    monkeypatch.setenv("GPUWARDEN_STORE", f"sqlite:///{tmp_path / 'none.db'}")
    for name in ("GPUWARDEN_SCHEDULER_URL", "GPUWARDEN_SCHEDULER_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("time.time", lambda: NOW)
    at = AppTest.from_file(str(APP), default_timeout=30)

    at.query_params["view"] = "scheduler"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def table(at: AppTest, column: str) -> pd.DataFrame:
    """The one table on the page with ``column``."""
    (frame,) = [d.value for d in at.dataframe if column in d.value.columns]
    return frame.reset_index(drop=True)


def test_the_page_shows_queue_tenants_quota_hours_and_preemptions(scheduler, monkeypatch, tmp_path):
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
    assert at.title[0].value == "Scheduler"
    m = {x.label: x.value for x in at.metric}
    assert m == {
        "Queued jobs": "4",
        "Running jobs": "4",  # checkpointing still holds its GPUs
        "GPUs in use": "18.64",  # 2 x 8 + 0.5 + 2 + 1/7 (a 1g MIG instance)
        "Preemptions this week": "2",
    }
    queue = table(at, "oldest_wait_h")
    assert queue["priority"].tolist() == ["inference", "training", "batch", "dev"]
    assert queue["jobs"].tolist() == [0, 2, 2, 0]
    assert queue["gpus"].tolist() == pytest.approx([0.0, 16.0, 0.25 + 6 / 7, 0.0])  # 2 x 3g
    assert queue.loc[1, "oldest_wait_h"] == pytest.approx(5.0)
    running = table(at, "interruptible")
    assert running[["tenant", "jobs", "interruptible"]].to_dict("list") == {
        "tenant": ["team-a", "team-b", "team-c"], "jobs": [1, 2, 1], "interruptible": [0, 2, 0],
    }  # fmt: skip
    assert running["gpus"].tolist() == pytest.approx([16.0, 2.5, 1 / 7])
    quota = table(at, "use_pct")
    assert quota[["tenant", "used_gpus", "gpus", "use_pct"]].to_dict("list") == {
        "tenant": ["team-a", "team-b"], "used_gpus": [16.0, 2.5], "gpus": [32, 10],
        "use_pct": [50.0, 25.0],
    }  # fmt: skip
    billing = table(at, "gpu_hours")
    assert billing["tenant"].tolist() == ["team-a", "team-b"]
    assert billing["gpu_hours"].tolist() == pytest.approx([332.5, 0.25 + 3 / 7])
    preempted = table(at, "job_id")
    assert preempted["job_id"].tolist() == ["j4", "j6"]  # newest first; last week's left out
    assert not [c for c in at.caption if "At least" in c.value]  # the log was read whole
    assert preempted["time"].tolist()[0] == "2026-12-02 11:59:00 UTC"
    # GPU-hours "this week": from Monday 00:00 UTC
    (billing_query,) = [q for p, q in scheduler.requests if p == "/v1/billing"]
    assert float(billing_query["since"][0]) == MONDAY == week_start(NOW)
    # a rerun within the cache's lifetime does not ask the scheduler again
    asked = len(scheduler.requests)
    at.run()
    assert len(scheduler.requests) == asked


def test_without_a_scheduler_the_page_says_how_to_configure_one(monkeypatch, tmp_path):
    at = run(monkeypatch, tmp_path)
    assert any("No scheduler is configured" in i.value for i in at.info)
    assert any("--scheduler-url" in c.value for c in at.code)
    assert not at.error


def test_a_missing_or_wrong_token_is_said_plainly(scheduler, monkeypatch, tmp_path):
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url)
    assert any("GPUWARDEN_SCHEDULER_TOKEN" in w.value for w in at.warning)
    assert scheduler.requests == []  # nothing asked without a token
    st.cache_data.clear()
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN="not-the-t0ken")  # fmt: skip
    (error,) = at.error
    assert "answered 401" in error.value and "wrong bearer token" in error.value
    assert "not-the-t0ken" not in error.value  # the token is never shown


def preempt(at: float, job_id: str) -> dict[str, Any]:
    return {"at": at, "actor": "scheduler", "action": "preempt", "job_id": job_id, "node": "n1",
            "gpu": 0, "reason": "inference needs the GPU"}  # fmt: skip


def test_a_busy_week_is_counted_exactly_page_by_page(scheduler, monkeypatch, tmp_path):
    """6,000 preemptions this week among other rows: two pages of this week's preemptions
    only, the second from the first one's last id, and an exact count."""
    this_week = [preempt(NOW - 60 - 2 * i, f"b{i}") for i in range(6000)]
    places = [{**p, "action": "place", "at": p["at"] - 1} for p in this_week[:3000]]
    scheduler.audit = [*this_week, *places, preempt(MONDAY - 1, "old")]
    scheduler.audit.sort(key=lambda r: r["at"], reverse=True)
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
    m = {x.label: x.value for x in at.metric}
    assert m["Preemptions this week"] == "6,000"
    assert not [c for c in at.caption if "At least" in c.value]
    queries = [q for p, q in scheduler.requests if p == "/v1/audit"]
    assert len(queries) == 2
    assert all(q["action"] == ["preempt"] and float(q["since"][0]) == MONDAY for q in queries)
    first = scheduler.audit_page(queries[0])
    assert "before_id" not in queries[0] and queries[1]["before_id"] == [str(first[-1]["id"])]
    assert len(table(at, "job_id")) == 6000


def test_the_page_cap_says_at_least(scheduler, monkeypatch, tmp_path):
    from gpuwarden.dashboard import _scheduler_page

    monkeypatch.setattr(_scheduler_page, "AUDIT_LIMIT", 50)
    monkeypatch.setattr(_scheduler_page, "AUDIT_PAGES", 3)
    scheduler.audit = [preempt(NOW - 60 - i, f"b{i}") for i in range(500)]
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
    m = {x.label: x.value for x in at.metric}
    assert m["Preemptions this week"] == "at least 150"
    assert any("at most 3 pages of 50 preemptions" in c.value for c in at.caption)
    assert len([p for p, _ in scheduler.requests if p == "/v1/audit"]) == 3


def test_an_older_schedulers_busy_week_is_a_lower_bound(scheduler, monkeypatch, tmp_path):
    """A scheduler from before audit paging ignores the filters and gives only its newest
    rows, without ids: when the 5,000 read are all this week, the page says "at least"
    instead of undercounting quietly."""
    scheduler.pages = False
    scheduler.audit = [preempt(NOW - 60 - i, f"b{i}") for i in range(6000)]  # all this week
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
    m = {x.label: x.value for x in at.metric}
    assert m["Preemptions this week"] == "at least 5,000"
    assert any("At least 5,000: only the newest 5,000 audit events" in c.value for c in at.caption)
    (audit_query,) = [q for p, q in scheduler.requests if p == "/v1/audit"]
    assert audit_query["limit"] == ["5000"]
    assert len(table(at, "job_id")) == 5000


def test_a_full_read_that_reaches_last_week_is_an_exact_count(scheduler, monkeypatch, tmp_path):
    scheduler.pages = False
    this_week = [preempt(NOW - 60 - i, f"b{i}") for i in range(4999)]
    scheduler.audit = [*this_week, preempt(MONDAY - 1, "old"), preempt(MONDAY - 2, "older")]
    at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=scheduler.url,
             GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
    m = {x.label: x.value for x in at.metric}
    assert m["Preemptions this week"] == "4,999"
    assert not [c for c in at.caption if "At least" in c.value]


def test_a_scheduler_that_does_not_answer_is_asked_once_per_15_s(monkeypatch, tmp_path):
    """A scheduler that accepts connections but never answers costs one timeout, not one per
    render: the failure is kept for 15 s and said so; the token is in no message."""
    from gpuwarden.dashboard import _api, _cache

    monkeypatch.setattr(_api, "TIMEOUT_S", 1.0)
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts; nobody answers
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    st.cache_data.clear()
    _cache.clear()
    try:
        started = time.monotonic()
        at = run(monkeypatch, tmp_path, GPUWARDEN_SCHEDULER_URL=url,
                 GPUWARDEN_SCHEDULER_TOKEN=TOKEN)  # fmt: skip
        first_s = time.monotonic() - started
        (error,) = at.error
        assert f"the scheduler at {url} did not answer" in error.value
        assert "(cached for 15 s)" in error.value and TOKEN not in error.value
        started = time.monotonic()
        at.run()
        again_s = time.monotonic() - started
        (error,) = at.error
        assert "did not answer" in error.value and "(cached for 15 s)" in error.value
        assert first_s >= 1.0 and again_s < 1.0, (first_s, again_s)
    finally:
        silent.close()
        _cache.clear()


def test_a_failure_is_forgotten_after_15_s():
    from gpuwarden.dashboard._api import ApiError
    from gpuwarden.dashboard._cache import Failures

    now = [100.0]
    failures = Failures(15, clock=lambda: now[0])
    key = ("http://s:1", "/v1/jobs", ())
    shown = failures.put(key, ApiError("the scheduler at http://s:1 did not answer: timed out"))
    assert str(shown).endswith("did not answer: timed out (cached for 15 s)")
    now[0] = 114.9
    held = failures.get(key)
    assert held is not None and str(held) == str(shown) and held.status == 0
    now[0] = 115.0
    assert failures.get(key) is None
