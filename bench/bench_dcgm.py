"""How long a dcgm+http:// collection of a large fleet takes, new code against old.

    .venv/bin/python bench/bench_dcgm.py                       # 128 endpoints x 8 GPUs, 10 rounds
    .venv/bin/python bench/bench_dcgm.py --endpoints 64 --repeat 20 --base 9813f6d

128 recorded-style bodies (the real L40S scrape in tests/data/dcgm/real, its series repeated for
8 GPUs per node, with pod labels and the driver label) are served from one local HTTP server on
127.0.0.1. The old collector is ``gpuwarden/collectors/dcgm.py`` and ``_promtext.py`` as they
were at ``--base`` (``git show``, loaded from a temp directory); old and new ``collect()`` run
alternately in the same process, against the same server. Prints the median milliseconds of
each and the ratio; the budget is new <= 1.2 x old.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

from gpuwarden.collectors.dcgm import DcgmCollector

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "dcgm" / "real" / "l40s_driver595_full.txt"
BASE = "9813f6d"  # wave2-labels' first parent: the collector before labels and MIG


def node_body(node: int, gpus: int = 8) -> str:
    lines = []
    for raw in REAL.read_text().splitlines():
        if raw.startswith("#"):
            lines.append(raw)
            continue
        for g in range(gpus):
            line = (
                raw.replace('gpu="0"', f'gpu="{g}"')
                .replace('device="nvidia0"', f'device="nvidia{g}"')
                .replace("GPU-5b4e07f6-3a86-4340-039d", f"GPU-{node:08x}-{g:04x}-4340-039d")
                .replace("00000000:00:07.0", f"00000000:{0x18 + 16 * g:02X}:00.0")
                .replace('Hostname="gpu1-wl8sg"', f'Hostname="node-{node:04d}"')
                .replace("}", f',container="c",namespace="ml",pod="job-{node}-{g}"}}', 1)
            )
            lines.append(line)
    return "\n".join(lines) + "\n"


def serve(endpoints: int) -> tuple[ThreadingHTTPServer, list[str]]:
    bodies = {f"/n{i}/metrics": node_body(i).encode() for i in range(endpoints)}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.request_queue_size = 256
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    return server, [f"http://127.0.0.1:{port}{p}" for p in bodies]


def old_collector_class(base: str, tmp: Path) -> type:
    """The collector as it was at ``base``, importing the parser of that commit too."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{base}:{path}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    (tmp / "old_promtext.py").write_text(show("gpuwarden/collectors/_promtext.py"))
    dcgm = show("gpuwarden/collectors/dcgm.py").replace(
        "from gpuwarden.collectors._promtext import", "from old_promtext import"
    )
    (tmp / "old_dcgm.py").write_text(dcgm)
    sys.path.insert(0, str(tmp))
    spec = importlib.util.spec_from_file_location("old_dcgm", tmp / "old_dcgm.py")
    assert spec and spec.loader
    module: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DcgmCollector  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoints", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--base", default=BASE, help="commit whose collector is the baseline")
    args = ap.parse_args()
    server, urls = serve(args.endpoints)
    with tempfile.TemporaryDirectory() as tmp:
        old_cls = old_collector_class(args.base, Path(tmp))
        collectors = {"old": old_cls(urls, timeout_s=30), "new": DcgmCollector(urls, timeout_s=30)}
        times: dict[str, list[float]] = {k: [] for k in collectors}
        gpus: dict[str, int] = {}
        for name, c in collectors.items():  # warm up: connections, first-scrape state
            batch = c.collect()
            assert not batch.problems, batch.problems[:3]
            gpus[name] = len({s.gpu.uuid for s in batch.samples})
        for _ in range(args.repeat):
            for name, c in collectors.items():
                t0 = time.perf_counter()
                c.collect()
                times[name].append(time.perf_counter() - t0)
        for c in collectors.values():
            c.close()
    server.shutdown()
    old = statistics.median(times["old"])
    print(f"{args.endpoints} endpoints, {gpus['new']} GPUs, median of {args.repeat} collections")
    print("| collector | ms | vs old |")
    print("|---|---:|---:|")
    for name in ("old", "new"):
        med = statistics.median(times[name])
        print(
            f"| {name} ({args.base if name == 'old' else 'working tree'}) | {1000 * med:.1f} "
            f"| {med / old:.2f}x |"
        )


if __name__ == "__main__":
    main()
