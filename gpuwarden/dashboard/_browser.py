"""Headless Chromium driven over the DevTools protocol, to screenshot the running dashboard.

``chromium --screenshot`` fires after a fixed virtual-time budget, which often catches Streamlit
before its first script run has drawn anything (a blank page or grey skeletons). Driving the
browser instead lets us wait until the page is really drawn: no skeleton, no "Running..."
status, charts rendered, and the page's size stable. Only the standard library, ``httpx`` and
``websockets`` (a Streamlit dependency) are used; the Debian ``chromium`` package is the browser.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuwarden.errors import GpuwardenError

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-allow-origins=*",
)

# True once Streamlit has drawn the page: content, no skeleton, no running script, every
# Vega chart drawn. Returns the page height so the caller can wait for it to settle.
_READY_JS = """
(() => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  if (!main || main.innerText.trim().length < 20) return -1;
  if (document.querySelector('[data-testid="stSkeleton"]')) return -1;
  const status = document.querySelector('[data-testid="stStatusWidget"]');
  if (status && /running/i.test(status.innerText)) return -1;
  for (const v of document.querySelectorAll('.vega-embed')) {
    if (!v.querySelector('canvas, svg')) return -1;
  }
  return main.scrollHeight;
})()
"""
_HEIGHT_JS = """document.querySelector('[data-testid="stMainBlockContainer"]')?.scrollHeight || 0"""
EXCEPTION_JS = "document.querySelectorAll('[data-testid=\"stException\"]').length"


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """One headless Chromium with one tab; ``close()`` (or ``with``) stops it by its PID."""

    def __init__(self, chromium: str, *, width: int = 1400, height: int = 1000) -> None:
        import httpx
        from websockets.sync.client import connect

        self.width, self.height = width, height
        # Chromium's helper processes can still write into the profile for a moment after the
        # browser exits: a cleanup race must not fail a capture that succeeded
        self._profile = tempfile.TemporaryDirectory(
            prefix="gpuwarden-chromium-", ignore_cleanup_errors=True
        )
        port = _free_port()
        argv = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self._profile.name}",
            f"--remote-debugging-port={port}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._ids = itertools.count(1)
        deadline = time.monotonic() + 30
        while True:
            try:
                pages = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
                target = next(p for p in pages if p.get("type") == "page")
                break
            except (httpx.TransportError, StopIteration, ValueError):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise GpuwardenError(
                        f"{chromium} did not start its DevTools endpoint"
                    ) from None
                time.sleep(0.1)
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(
            connect(target["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        )

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events in between are skipped)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise GpuwardenError(f"DevTools {method}: {reply['error'].get('message')}")
                return dict(reply.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, *, timeout_s: float = 60.0, settle_s: float = 1.0) -> bool:
        """Load ``url`` and wait until the Streamlit page is drawn and its height has not
        changed for ``settle_s``. Returns False if that did not happen within ``timeout_s``."""
        self.call("Page.enable")
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        last, since = -2, time.monotonic()
        while time.monotonic() < deadline:
            height = self.evaluate(_READY_JS)
            now = time.monotonic()
            if height != last:
                last, since = height, now
            elif isinstance(height, int | float) and height > 0 and now - since >= settle_s:
                return True
            time.sleep(0.25)
        return False

    def exceptions(self) -> int:
        """How many Streamlit exception boxes the page shows."""
        return int(self.evaluate(EXCEPTION_JS) or 0)

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText") or "")

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """Write a PNG of the page: down to the end of its content when ``full_page`` (at most
        the window's height; open the browser tall for long pages), else the window."""
        height = self.height
        if full_page:
            content = self.evaluate(_HEIGHT_JS)
            height = int(min(max(600, int(content or 0) + 80), self.height))
        clip = {"x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}
        shot = self.call("Page.captureScreenshot", format="png", clip=clip)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        stack = getattr(self, "_stack", None)
        if stack is not None:
            stack.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
        self._profile.cleanup()
        if os.path.exists(self._profile.name):  # a late writer: try once more
            time.sleep(0.5)
            shutil.rmtree(self._profile.name, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def blank_reason(png: Path) -> str | None:
    """Why a screenshot looks blank (nearly uniform, or hardly any dark "ink" such as text),
    or None when it shows a page."""
    from PIL import Image, ImageStat

    with Image.open(png) as img:
        gray = img.convert("L")
        std = ImageStat.Stat(gray).stddev[0]
        hist = gray.histogram()
    ink = sum(hist[:160]) / max(sum(hist), 1)
    if std < 8:
        return f"{png.name} is nearly uniform (grey-level std {std:.1f})"
    if ink < 0.002:
        return f"{png.name} has almost no text or chart ink ({ink:.2%} dark pixels)"
    return None
