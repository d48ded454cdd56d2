"""Which model weights a node's local NVMe cache holds, as the agent reports them.

A job may name the weights it loads (``Job.model``, ``gpuwarden jobs submit --model``). Loading
them from the node's NVMe instead of network storage shortens an inference replica's cold start,
so placement prefers a node whose cache holds them, among placements the policy already ranks
equal (``policies.base.prefer_among``): it never costs fragmentation.

The agent scans its cache directory (``--model-cache DIR``) each sync and sends what it finds
when that changed. Two layouts are understood:

- the Hugging Face hub cache (``$HF_HOME/hub``): ``models--meta-llama--Llama-3.1-8B`` with a
  ``snapshots/`` directory is ``meta-llama/Llama-3.1-8B``;
- anything else: each directory holding a ``config.json`` (one level, or ``org/name`` two levels)
  is named by its path under the cache directory.
"""

from __future__ import annotations

from pathlib import Path

#: names sent per sync at most (the API's limit)
MAX_MODELS = 4096


def scan_cache(root: Path) -> list[str]:
    """Model names found under ``root`` (sorted; empty when it does not exist)."""
    if not root.is_dir():
        return []
    found: set[str] = set()
    for entry in root.iterdir():
        if not entry.is_dir():
            continue
        if entry.name.startswith("models--"):
            snaps = entry / "snapshots"
            if snaps.is_dir() and any(snaps.iterdir()):
                found.add(entry.name.removeprefix("models--").replace("--", "/"))
        elif (entry / "config.json").is_file():
            found.add(entry.name)
        else:
            for sub in entry.iterdir():
                if sub.is_dir() and (sub / "config.json").is_file():
                    found.add(f"{entry.name}/{sub.name}")
    return sorted(found)[:MAX_MODELS]


class CacheWatcher:
    """Scans ``root`` on each ``poll``; returns the names when they changed since the last
    call, None otherwise (the agent then leaves ``models`` out of its sync)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._last: list[str] | None = None

    def poll(self) -> list[str] | None:
        now = scan_cache(self.root)
        if now == self._last:
            return None
        self._last = now
        return now

    def forget(self) -> None:
        """Send the full list again next time (after a registration)."""
        self._last = None


__all__ = ["CacheWatcher", "MAX_MODELS", "scan_cache"]
