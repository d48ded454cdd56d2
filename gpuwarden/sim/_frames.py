"""What the simulator hands out: a chunk as a wide DataFrame, or one step as Samples."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuwarden.sim._engine import ChunkArrays, Engine
from gpuwarden.telemetry import FIELD_NAMES, FRAME_ID_COLUMNS, Sample

#: Frame columns: the identity columns, the slot's rack, then every catalogue field.
FRAME_COLUMNS: tuple[str, ...] = (*FRAME_ID_COLUMNS, "rack", *FIELD_NAMES)


def _categorical(codes: np.ndarray, categories: list[str]) -> pd.Categorical:
    return pd.Categorical.from_codes(codes, categories=categories, validate=False)


def to_frame(eng: Engine, ca: ChunkArrays) -> pd.DataFrame:
    """The wide frame of a chunk: one row per live GPU per step, ts-major.

    String columns are categoricals (cheap at 1.5 M rows a day); field columns are float64
    with NaN for absent fields, written once into one block that the frame shares.
    """
    steps, n = ca.alive.shape
    sel = ca.alive.reshape(-1)
    every = bool(sel.all())
    rows = steps * n if every else int(sel.sum())
    block = np.empty((len(FIELD_NAMES), rows))
    for i, name in enumerate(FIELD_NAMES):
        a = ca.fields[name]
        if a.strides[0] == 0:  # the same value every step: tile one row
            flat = np.tile(a[0], steps)
        else:
            flat = a.reshape(-1)
        block[i] = flat if every else flat[sel]

    def per_slot(values: np.ndarray) -> np.ndarray:
        tiled = np.tile(values, steps)
        return tiled if every else tiled[sel]

    grid = ca.lives
    flat_lives = np.tile(grid[0], steps) if grid.strides[0] == 0 else grid.reshape(-1)
    if not every:
        flat_lives = flat_lives[sel]
    present = np.flatnonzero(np.bincount(flat_lives, minlength=len(eng.lives)))
    code_of = np.zeros(len(eng.lives), dtype=np.int64)
    code_of[present] = np.arange(present.size)
    bus = sorted(set(eng.bus_ids))
    bus_code = np.array([bus.index(b) for b in eng.bus_ids])
    ids = pd.DataFrame(
        {
            "ts": np.repeat(ca.ts, n) if every else np.repeat(ca.ts, n)[sel],
            "hostname": _categorical(per_slot(eng.node_of_slot), eng.hostnames),
            "gpu": per_slot(eng.index_of_slot.astype(np.int64)),
            "uuid": _categorical(code_of[flat_lives], [eng.lives[i].gpu.uuid for i in present]),
            "model": _categorical(per_slot(eng.model_of_slot), eng.model_names),
            "pci_bus_id": _categorical(per_slot(bus_code), bus),
            "rack": _categorical(per_slot(eng.rack_of_slot), eng.racks),
        }
    )
    values = pd.DataFrame(block.T, columns=list(FIELD_NAMES), copy=False)
    return pd.concat([ids, values], axis=1)


def to_samples(eng: Engine, ca: ChunkArrays, row: int) -> list[Sample]:
    """Every live GPU's Sample at one step of the chunk; NaN fields are left out."""
    ts = float(ca.ts[row])
    cols = np.flatnonzero(ca.alive[row])
    table = np.empty((len(FIELD_NAMES), cols.size))
    for i, name in enumerate(FIELD_NAMES):
        table[i] = ca.fields[name][row, cols]
    present = ~np.isnan(table)
    out = []
    for j, g in enumerate(cols):
        life = eng.lives[int(ca.lives[row, g])]
        values = {name: float(table[i, j]) for i, name in enumerate(FIELD_NAMES) if present[i, j]}
        out.append(Sample(ts, life.gpu, values))
    return out
