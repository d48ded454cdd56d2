"""What ``httpguard`` costs a request that it lets through, against reading and parsing the
same body without it.

    .venv/bin/python bench/bench_httpguard.py                 # a 3,000-alert webhook (~0.6 MB)
    .venv/bin/python bench/bench_httpguard.py --alerts 100 --repeat 50

The body is an Alertmanager v4 group (strings with brackets, quotes and escapes in them). Timed
in one process: ``json_depth`` against ``json.loads`` of the same bytes (the parse every request
pays anyway), and one request through ``BodyGuard`` around an app that reads and parses the body,
against the bare app, both driven as ASGI calls (no sockets, so only the guard's work differs).
Each pair is timed in alternation; prints median milliseconds and each one's ratio to its
baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from gpuwarden.httpguard import BodyGuard, json_depth


def webhook(n_alerts: int) -> bytes:
    alerts = [
        {"status": "firing", "labels": {"alertname": "GpuAtRisk", "Hostname": f"node{i}",
                                        "gpu": str(i % 8), "UUID": f"GPU-{i:08x}"},
         "annotations": {"summary": f'GPU node{i}/{i % 8} at risk [0.83] "SBE rate" \\ up\n'},
         "startsAt": "2026-12-02T10:00:00.123Z", "fingerprint": f"{i:016x}"}
        for i in range(n_alerts)
    ]  # fmt: skip
    return json.dumps({"version": "4", "status": "firing", "alerts": alerts}).encode()


async def parse_app(scope: Any, receive: Any, send: Any) -> None:
    body, more = b"", True
    while more:
        message = await receive()
        body, more = body + message.get("body", b""), message.get("more_body", False)
    json.loads(body)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def request(app: Any, body: bytes) -> Callable[[], None]:
    scope = {"type": "http", "method": "POST", "path": "/alertmanager", "query_string": b"",
             "root_path": "", "headers": [(b"content-length", str(len(body)).encode()),
                                          (b"authorization", b"Bearer t")]}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    loop = asyncio.new_event_loop()
    return lambda: loop.run_until_complete(app(dict(scope), receive, send))


def paired_ms(
    base: Callable[[], object], other: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Median milliseconds of ``base`` and ``other``, timed in alternation so that a machine
    whose load drifts (a shared CI runner) slows both alike."""
    base(), other()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for fn, out in ((base, times[0]), (other, times[1])):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--alerts", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    body = webhook(args.alerts)
    guarded = BodyGuard(parse_app, authenticate=lambda request: None, max_body_bytes=1 << 24)
    parse, depth = paired_ms(lambda: json.loads(body), lambda: json_depth(body), args.repeat)
    bare, guard = paired_ms(request(parse_app, body), request(guarded, body), args.repeat)
    rows = [
        ("json.loads (baseline)", parse, None),
        ("json_depth", depth, 0),
        ("request, bare app (baseline)", bare, None),
        ("request through BodyGuard", guard, 2),
    ]
    print(f"body: {len(body):,} bytes, {args.alerts:,} alerts, median of {args.repeat}")
    print(f"{'':32} {'ms':>8} {'ratio':>7}")
    for name, ms, base in rows:
        ratio = "" if base is None else f"{ms / rows[base][1]:.2f}x"
        print(f"{name:32} {ms:8.2f} {ratio:>7}")


if __name__ == "__main__":
    main()
