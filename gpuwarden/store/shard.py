"""One serve replica's share of a fleet: the racks (hosts with no rack: the hosts) whose
stable hash mod n is i.

    store = HostShard(open_store("victoriametrics://vm:8428"), index=0, count=2)
    gpuwarden score --shard 0/2    gpuwarden serve --no-collect --shard 1/2

A fleet too large for one process to score in its interval is split across replicas that read
the same TSDB, each scoring whole racks: the model compares a GPU with its node's and its
rack's other GPUs (``models.features.PEER_SIGNALS``), so a shard of whole hosts that split a
rack gave those GPUs other risks than one process does (0.029 for 0.025 in the tests). A
GPU with no rack is sharded by its host. The hash is BLAKE2b of the hostname: the same in every process
and release, unlike Python's ``hash``, so a host joins the same shard everywhere; and not
CRC-32, which is linear: node000 to node003 all fall in shard 0 of 2. Reads go through
with the shard's hosts or GPUs as filters, so a remote store asks its server only for them;
everything else (writes, ``url``, ``close``) is the store's own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuwarden.errors import InputError


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` (0 <= i < n) as (i, n); anything else is an ``InputError`` naming it."""
    index, sep, count = text.partition("/")
    if not sep or not index.strip().isdigit() or not count.strip().isdigit():
        raise InputError(f"--shard {text!r}: expected i/n, e.g. 0/2 (i from 0 to n-1)")
    i, n = int(index), int(count)
    if n < 1 or i >= n:
        raise InputError(f"--shard {text!r}: i must be from 0 to n-1 and n at least 1")
    return i, n


def shard_of(hostnames: Iterable[str], count: int) -> np.ndarray:
    """The shard (0 .. count-1) of each key (a rack or a host)."""
    return np.array(
        [
            int.from_bytes(hashlib.blake2b(str(h).encode(), digest_size=8).digest(), "big") % count
            for h in hostnames
        ],
        dtype=np.int64,
    )


class HostShard:
    """``store`` restricted, for reading, to the racks (or rackless hosts) of shard ``index``
    of ``count``."""

    def __init__(self, store: Any, index: int, count: int) -> None:
        if not 0 <= index < count:
            raise InputError(f"shard {index}/{count}: i must be from 0 to n-1")
        self.store = store
        self.index = int(index)
        self.count = int(count)

    @property
    def fleet_store(self) -> Any:
        """The store this shard is cut from: what a score reads the fleet's error levels and
        thermal rises from (``models.score.fleet_panel``)."""
        return self.store

    def _owned(self) -> set[str]:
        """The hosts of this shard: by rack, or by hostname where the rack is unknown."""
        gpus = self.store.gpus()
        if gpus.empty:
            return set()
        racks = gpus["rack"].fillna("").astype(str) if "rack" in gpus else ""
        key = np.where(racks == "", "host:" + gpus["hostname"].astype(str), "rack:" + racks)
        mine = shard_of(key, self.count) == self.index
        return set(gpus["hostname"].astype(str)[mine])

    def _mine(self, frame: pd.DataFrame) -> pd.DataFrame:
        if frame.empty or "hostname" not in frame:
            return frame
        return frame[frame["hostname"].astype(str).isin(self._owned())].reset_index(drop=True)

    def _hosts(self, given: Sequence[str] | None) -> list[str]:
        mine = sorted(self._owned())
        return mine if given is None else [h for h in mine if h in set(given)]

    def _uuids(self, given: Sequence[str] | None) -> list[str]:
        uuids = self.gpus()["uuid"].tolist()
        return uuids if given is None else [u for u in uuids if u in set(given)]

    def gpus(self) -> pd.DataFrame:
        return self._mine(self.store.gpus())

    def mig_instances(self) -> pd.DataFrame:
        return self._mine(self.store.mig_instances())

    def read_samples(self, *, hostnames: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
        return self.store.read_samples(hostnames=self._hosts(hostnames), **kw)

    def read_window(self, *, hostnames: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
        return self.store.read_window(hostnames=self._hosts(hostnames), **kw)

    def read_events(self, *, uuids: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
        return self.store.read_events(uuids=self._uuids(uuids), **kw)

    def read_verdicts(self, *, uuids: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
        return self.store.read_verdicts(uuids=self._uuids(uuids), **kw)

    def read_assignments(self, *, uuids: Sequence[str] | None = None, **kw: Any) -> pd.DataFrame:
        return self.store.read_assignments(uuids=self._uuids(uuids), **kw)

    def read_failures(self, **kw: Any) -> pd.DataFrame:
        return self._mine(self.store.read_failures(**kw))

    def read_nodes(self, *, hostnames: Sequence[str] | None = None) -> pd.DataFrame:
        return self.store.read_nodes(hostnames=self._hosts(hostnames))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def __repr__(self) -> str:
        return f"HostShard({self.store!r}, {self.index}/{self.count})"


__all__ = ["HostShard", "parse_shard", "shard_of"]
