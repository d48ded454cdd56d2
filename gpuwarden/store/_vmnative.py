"""VictoriaMetrics' native export (``/api/v1/export/native``) read into numpy arrays.

The answer is the server's own storage blocks, sent as they lie on disk (VictoriaMetrics 1.79,
``app/vmselect/prometheus`` and ``lib/storage``):

    16 bytes    the time range asked: two int64, big-endian, zig-zag (ms)
    per block   uint32 BE size, then the series' name: ``name \\x01 (key \\x01 value \\x01)*``,
                where a 0, 1 or 2 byte inside a name or value is written 0 '0', 0 '1', 0 '2'
                uint32 BE size, then the block: varint first timestamp, varint first value,
                uvarint rows, varint decimal exponent, one byte each saying how timestamps and
                values are kept, uvarint size + timestamps, uvarint size + values

Varints are LEB128, the signed ones zig-zag. Timestamps (ms) and values (integer mantissas,
``value = mantissa * 10**exponent``) are each kept one of six ways:

    1  zstd of 5    2  one varint: the step from each to the next    3  no bytes: all the first
    4  zstd of 6    5  the first step, then rows - 2 steps of steps   6  rows - 1 steps

(the server stores 64 bits of precision unless told otherwise, and exports them exactly).
The float of a mantissa is worked out as the server's own query path does (a negative
exponent divides by ``10**-e``, Go's ``math.Pow10``), so every value is the double its JSON
answer would have printed. Three mantissas are special: ``2**63 - 1`` is +Inf, ``-2**63`` -Inf,
``2**63 - 2`` a staleness marker, which the query path gives as NaN and so does ``decode``.

Reading this costs the server next to nothing (no block is unpacked, no number formatted) and
costs here a few numpy passes over the points: every varint of an answer is decoded in one
go, with no Python loop per point (only one per block, to find where it lies).

What the query path does and the blocks do not: blocks are whole (samples outside the range
asked come too), a series' blocks arrive in any order (the server sends them from all its
cores), and parts not merged yet may overlap and repeat a millisecond, which the server's
deduplication would have settled. ``decode`` trims, orders, and says whether a millisecond
came twice (the caller then asks the query path, the one that knows which sample the server
keeps).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
import zstandard

from gpuwarden.store._promapi import Flat

#: How a block keeps its timestamps or values (``lib/encoding`` MarshalType).
ZSTD_DELTA2, DELTA_CONST, CONST, ZSTD_DELTA, DELTA2, DELTA = 1, 2, 3, 4, 5, 6
_ZSTD = {ZSTD_DELTA2: DELTA2, ZSTD_DELTA: DELTA}
_INF_POS = (1 << 63) - 1
_INF_NEG = -(1 << 63)
_STALE = (1 << 63) - 2
_HEADER = 16
_SIZE = struct.Struct(">I")
#: bytes a varint may take
_VARINT_MAX = 10


def _go_pow10(n: int) -> float:
    """Go's ``math.Pow10(n)`` for ``n >= 0``: a power of 10**32 times one below it, each the
    double nearest the decimal (so not always the double nearest 10**n itself)."""
    if n > 308:
        return float("inf")
    return float(f"1e{32 * (n // 32)}") * float(f"1e{n % 32}")


#: 10**n as the server computes it, n = 0 ... 32767 (an int16 exponent's magnitude)
_POW10 = np.array([_go_pow10(n) for n in range(310)] + [float("inf")], dtype=np.float64)


class NativeFormatError(ValueError):
    """An answer that is not whole native export blocks: cut short, or not this format."""


@dataclass(frozen=True)
class Decoded:
    """An answer's points: ``flat`` (series in the order first met, each one's points by
    time, only those in the range asked), ``repeats`` (a series has two samples at one
    millisecond: which one the server keeps is its deduplication's choice, not known here)
    and ``rows``, how many points the blocks held in all (in the range asked or not)."""

    flat: Flat
    repeats: bool
    rows: int = 0
    #: ``rows``, the blocks' points, and ``estimate``, about how many of them lie in the range
    #: asked (from the blocks' headers, before anything is decoded)
    estimate: float = 0.0
    #: nothing was decoded: the blocks held more than ``max_overread`` times the points asked
    skipped: bool = False


def decode(body: bytes, start_ms: int, end_ms: int, *, max_overread: float = math.inf) -> Decoded:
    """The points of ``body`` (an ``/api/v1/export/native`` answer) in ``[start_ms,
    end_ms)``; none (``skipped``) when the blocks hold more than ``max_overread`` times the
    points the range is estimated to hold: a window with a sliver of each block is then
    cheaper asked of the query API, which the server cuts. Raises ``NativeFormatError`` for a
    body cut short or malformed."""
    if len(body) < _HEADER:
        raise NativeFormatError(f"{len(body)} bytes: shorter than the 16-byte header")
    names, series, starts, sizes = _frame(body)
    if not series:
        return Decoded(_empty(), False)
    buf = np.frombuffer(body, dtype=np.uint8)
    blocks = _headers(buf, np.array(starts, dtype=np.int64), np.array(sizes, dtype=np.int64))
    total = int(blocks.rows.sum())
    estimate = _estimate(body, blocks, start_ms, end_ms)
    if total > max_overread * max(1.0, estimate):
        return Decoded(_empty(), False, total, estimate, skipped=True)
    sid = np.array(series, dtype=np.int64)
    # a series' blocks together, oldest first: then its points come out in order unless
    # two blocks overlap (parts not merged yet), which ``_Points`` finds
    order = np.lexsort((blocks.first[0], sid))
    sid, rows, scale = sid[order], blocks.rows[order], blocks.scale[order]
    ts_streams, value_streams = (
        _Streams(blocks.kind[k][order], blocks.first[k][order], rows,
                 blocks.data_at[k][order], blocks.data_size[k][order])
        for k in (0, 1)
    )  # fmt: skip
    points = _Points(start_ms, end_ms)
    # a batch of blocks at a time: each numpy pass then runs over arrays the cache holds
    ends = np.cumsum(rows)
    cuts = np.searchsorted(ends, np.arange(BATCH_POINTS, int(ends[-1]), BATCH_POINTS), "right")
    for lo, hi in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(rows)].tolist(), strict=True):
        if hi > lo:
            ts_ms = _integers(body, ts_streams[lo:hi])
            values = _floats(_integers(body, value_streams[lo:hi]), scale[lo:hi], rows[lo:hi])
            points.add(np.repeat(sid[lo:hi], rows[lo:hi]), ts_ms, values)
    point_sid, ts_ms, values, repeats = points.done()
    counts = np.bincount(point_sid, minlength=len(names))
    present = np.flatnonzero(counts)
    labels = _labels([names[i] for i in present.tolist()])
    flat = Flat(labels, counts[present].astype(np.int64), ts_ms / 1000.0, values, ts_ms)
    return Decoded(flat, repeats, total, estimate)


def _estimate(body: bytes, blocks: _Blocks, start_ms: int, end_ms: int) -> float:
    """About how many of the blocks' points lie in ``[start_ms, end_ms)``, from their
    headers: a block whose times step evenly (its step one varint) or that holds one time is
    known to the point; of the others (their last time is only known once decoded), the times
    of one in ``len / ESTIMATE_SAMPLE`` are decoded, and the share of theirs in the range is
    taken for all (the blocks of one answer are alike: the same fields over the same hours)."""
    buf = np.frombuffer(body, dtype=np.uint8)
    first, rows, kind = blocks.first[0], blocks.rows, blocks.kind[0]
    last = first.copy()
    known = (rows == 1) | (kind == CONST)
    even = (kind == DELTA_CONST) & (rows > 1) & (blocks.data_size[0] > 0)
    if even.any():
        at = blocks.data_at[0][even]
        step, _ = _varint_at(buf, at, at + blocks.data_size[0][even])
        last[even] = first[even] + step * (rows[even] - 1)
        known |= even
    span = np.maximum(last - first, 1).astype(np.float64)
    inside = np.clip((np.minimum(last + 1, end_ms) - np.maximum(first, start_ms)) / span, 0, 1)
    one = first == last
    inside[one] = ((first[one] >= start_ms) & (first[one] < end_ms)).astype(np.float64)
    out = float((inside * rows)[known].sum())
    other = np.flatnonzero(~known)
    if len(other):
        pick = other[:: max(1, len(other) // ESTIMATE_SAMPLE)]
        ts = _integers(body, _Streams(kind[pick], first[pick], rows[pick],
                                      blocks.data_at[0][pick], blocks.data_size[0][pick]))  # fmt: skip
        held = int(((ts >= start_ms) & (ts < end_ms)).sum())
        out += float(rows[other].sum()) * held / float(rows[pick].sum())
    return out


#: blocks whose times are decoded to estimate how much of an answer a window holds
ESTIMATE_SAMPLE = 16


#: Points decoded together (a few MB of temporaries).
BATCH_POINTS = 1 << 15


class _Points:
    """Decoded points gathered batch by batch: those in ``[start_ms, end_ms)``, by series
    then time."""

    def __init__(self, start_ms: int, end_ms: int) -> None:
        self.start_ms, self.end_ms = start_ms, end_ms
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.unordered = self.repeats = False
        self._last = (-1, 0)

    def add(self, sid: np.ndarray, ts_ms: np.ndarray, values: np.ndarray) -> None:
        keep = (ts_ms >= self.start_ms) & (ts_ms < self.end_ms)
        if not keep.all():
            sid, ts_ms, values = sid[keep], ts_ms[keep], values[keep]
        if not len(sid):
            return
        # against the point before, in this batch or the last
        same = np.empty(len(sid), dtype=bool)
        same[0] = sid[0] == self._last[0]
        np.equal(sid[1:], sid[:-1], out=same[1:])
        step = np.empty(len(sid), dtype=np.int64)
        step[0] = ts_ms[0] - self._last[1]
        np.subtract(ts_ms[1:], ts_ms[:-1], out=step[1:])
        self.unordered |= bool((same & (step < 0)).any())
        self.repeats |= bool((same & (step == 0)).any())
        self._last = (int(sid[-1]), int(ts_ms[-1]))
        self.parts.append((sid, ts_ms, values))

    def done(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        """Series index, ts (ms) and value of every point; whether a series repeats a
        millisecond."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.empty(0), False
        sid, ts_ms, values = (np.concatenate(p) for p in zip(*self.parts, strict=True))
        if self.unordered:  # overlapping blocks of a series: sort its points
            by = np.lexsort((ts_ms, sid))
            sid, ts_ms, values = sid[by], ts_ms[by], values[by]
            same = sid[1:] == sid[:-1]
            self.repeats = bool((same & (ts_ms[1:] == ts_ms[:-1])).any())
        return sid, ts_ms, values, self.repeats


def _empty() -> Flat:
    return Flat([], np.zeros(0, dtype=np.int64), np.empty(0), np.empty(0))


def _frame(body: bytes) -> tuple[list[bytes], list[int], list[int], list[int]]:
    """Walk the blocks: the distinct series names, and each block's series (index into
    them), start and size. One short Python step per block: its place depends on the last."""
    unpack = _SIZE.unpack_from
    names: dict[bytes, int] = {}
    series: list[int] = []
    starts: list[int] = []
    sizes: list[int] = []
    pos, end = _HEADER, len(body)
    while pos < end:
        if pos + 4 > end:
            raise NativeFormatError(f"cut short in a series name's size at byte {pos}")
        (n,) = unpack(body, pos)
        name = body[pos + 4 : pos + 4 + n]
        pos += 4 + n
        if pos + 4 > end:
            raise NativeFormatError(f"cut short in a series name or block size at byte {pos}")
        (size,) = unpack(body, pos)
        pos += 4
        if pos + size > end:
            raise NativeFormatError(f"cut short: a block of {size} bytes at byte {pos}")
        series.append(names.setdefault(name, len(names)))
        starts.append(pos)
        sizes.append(size)
        pos += size
    return list(names), series, starts, sizes


@dataclass(frozen=True)
class _Blocks:
    """Each block's header; pairs are (timestamps, values)."""

    rows: np.ndarray
    scale: np.ndarray
    first: tuple[np.ndarray, np.ndarray]
    kind: tuple[np.ndarray, np.ndarray]
    data_at: tuple[np.ndarray, np.ndarray]
    data_size: tuple[np.ndarray, np.ndarray]


def _headers(buf: np.ndarray, start: np.ndarray, size: np.ndarray) -> _Blocks:
    """Every block's header, read for all blocks at once."""
    limit = start + size
    pos = start
    first_ts, pos = _varint_at(buf, pos, limit)
    first_value, pos = _varint_at(buf, pos, limit)
    rows, pos = _varint_at(buf, pos, limit, signed=False)
    scale, pos = _varint_at(buf, pos, limit)
    if (pos + 2 > limit).any():
        raise NativeFormatError("a block cut short before its encodings")
    kinds = (buf[pos].astype(np.int64), buf[pos + 1].astype(np.int64))
    pos = pos + 2
    ts_size, pos = _varint_at(buf, pos, limit, signed=False)
    ts_at, pos = pos, pos + ts_size
    value_size, pos = _varint_at(buf, np.minimum(pos, limit), limit, signed=False)
    value_at, pos = pos, pos + value_size
    if (pos != limit).any():
        raise NativeFormatError("a block's data does not fill it exactly")
    if ((rows < 1) | (rows > 0xFFFFFFFF)).any():
        raise NativeFormatError("a block with no rows or too many")
    if ((scale < -32768) | (scale > 32767)).any():
        raise NativeFormatError("a decimal exponent out of int16 range")
    for k in kinds:
        if ((k < ZSTD_DELTA2) | (k > DELTA)).any():
            raise NativeFormatError(f"an unknown encoding {int(k[(k < 1) | (k > 6)][0])}")
    return _Blocks(
        rows, scale, (first_ts, first_value), kinds, (ts_at, value_at), (ts_size, value_size)
    )


def _varint_at(
    buf: np.ndarray, pos: np.ndarray, limit: np.ndarray, *, signed: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each of ``pos`` (none may reach its ``limit``) and the byte after it."""
    value = np.zeros(len(pos), dtype=np.uint64)
    after = np.zeros(len(pos), dtype=np.int64)
    open_ = np.ones(len(pos), dtype=bool)
    for j in range(_VARINT_MAX):
        at = pos + j
        if (open_ & (at >= limit)).any():
            raise NativeFormatError("a block header cut short")
        byte = buf[np.where(open_, at, 0)]
        value |= np.where(open_, (byte & 0x7F).astype(np.uint64) << np.uint64(7 * j), 0)
        ends = open_ & (byte < 0x80)
        after[ends] = at[ends] + 1
        open_ &= ~ends
        if not open_.any():
            break
    else:
        raise NativeFormatError("a varint longer than 10 bytes in a block header")
    return (_unzigzag(value) if signed else value.astype(np.int64)), after


def _unzigzag(u: np.ndarray) -> np.ndarray:
    """Zig-zag ``u`` (uint64) back to int64: 0, 1, 2, 3, ... -> 0, -1, 1, -2, ..."""
    half = (u >> np.uint64(1)).view(np.int64)
    return half ^ -(u & np.uint64(1)).view(np.int64)


@dataclass(frozen=True)
class _Streams:
    """Runs of integers to decode, one per block: its timestamps, or its values."""

    kind: np.ndarray
    first: np.ndarray
    rows: np.ndarray
    at: np.ndarray
    size: np.ndarray

    def __getitem__(self, part: slice) -> _Streams:
        return _Streams(*(getattr(self, f)[part] for f in ("kind", "first", "rows", "at", "size")))


def _integers(body: bytes, s: _Streams) -> np.ndarray:
    """Every stream's integers, one after another (wrapping int64 arithmetic, as the
    server's)."""
    view = memoryview(body)
    kind = s.kind.copy()
    sizes = s.size.copy()
    pieces: list[bytes | memoryview] = []
    zstd = (kind == ZSTD_DELTA) | (kind == ZSTD_DELTA2)
    dctx = zstandard.ZstdDecompressor() if zstd.any() else None
    for i in np.flatnonzero(kind != CONST).tolist():
        chunk = view[int(s.at[i]) : int(s.at[i] + s.size[i])]
        if dctx is not None and zstd[i]:
            try:
                plain = dctx.decompress(chunk, max_output_size=int(s.rows[i]) * _VARINT_MAX)
            except zstandard.ZstdError as exc:
                raise NativeFormatError(f"a zstd block that does not decompress: {exc}") from exc
            sizes[i] = len(plain)
            pieces.append(plain)
        else:
            pieces.append(chunk)
    kind[zstd] = np.where(kind[zstd] == ZSTD_DELTA, DELTA, DELTA2)
    const = kind == CONST
    if (sizes[const] != 0).any():
        raise NativeFormatError("a constant block with data")
    data = np.frombuffer(b"".join(pieces), dtype=np.uint8)
    last = data < 0x80
    stops = None if last.all() else np.flatnonzero(last)  # each varint's last byte
    ints = _varints(data, stops) if len(data) else np.zeros(0, dtype=np.int64)
    # each stream's varints: as many as its encoding needs, and none reaching the next (a
    # search per stream among the varints' ends, not a pass over every byte)
    ends = np.cumsum(sizes)
    need = np.where(kind == DELTA_CONST, 1, np.where(const, 0, s.rows - 1))
    if stops is None:  # one byte each
        got = sizes
    else:
        got = np.searchsorted(stops, ends) - np.searchsorted(stops, ends - sizes)
    cut = data[ends[sizes > 0] - 1] >= 0x80  # a stream's last varint runs on
    if (got != need).any() or cut.any():
        raise NativeFormatError("a block whose varints do not match its rows")
    # every stream as its first integer and then its steps, one array for all: a stream of
    # steps gives its varints, a delta-const one its one step rows - 1 times, a constant one
    # a zero rows - 1 times; then a cumulative sum (twice for steps of steps) gives them all
    if const.any():
        ints = np.insert(ints, (np.cumsum(need) - need)[const], 0)
        need = need + const
    twice = kind == DELTA2
    heads = np.where(twice, 0, s.first)
    src = np.insert(ints, np.cumsum(need) - need, heads)
    if const.any() or (kind == DELTA_CONST).any():
        reps = np.ones(len(src), dtype=np.int64)
        head_at = np.cumsum(need + 1) - need - 1
        once = const | (kind == DELTA_CONST)
        reps[head_at[once] + 1] = s.rows[once] - 1
        steps = np.repeat(src, reps)
    else:
        steps = src
    start = np.cumsum(s.rows) - s.rows
    out = _run_sums(steps, start)
    if twice.any():
        again = _run_sums(out, start)
        again += np.repeat(s.first, s.rows)
        out = again if twice.all() else np.where(np.repeat(twice, s.rows), again, out)
    return out


def _run_sums(x: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The cumulative sum of ``x`` restarted at each run (``start``): each run's first item
    less the sum of the run before, then one sum over all. int64 overflow wraps and unwraps,
    as in the server's own sums."""
    x = x.copy()
    if len(start) > 1:
        x[start[1:]] -= np.add.reduceat(x, start)[:-1]
    return np.cumsum(x, out=x)


def _varints(data: np.ndarray, stops: np.ndarray | None) -> np.ndarray:
    """Every zig-zag varint of ``data`` (which ends on a varint's last byte), in order;
    ``stops``: where each varint ends (None: every byte is a varint)."""
    if stops is None:  # one byte each: small steps
        return _unzigzag(data.astype(np.uint64))
    ends = stops
    if not len(ends) or ends[-1] != len(data) - 1:
        raise NativeFormatError("varints cut short")
    begins = np.empty_like(ends)
    begins[0] = 0
    begins[1:] = ends[:-1] + 1
    width = ends - begins + 1
    if width.max() > _VARINT_MAX:
        raise NativeFormatError("a varint longer than 10 bytes")
    # the 8 bytes from each varint's first, as one little-endian word (a view whose items
    # overlap), the bytes past the varint cleared, then its 7-bit groups packed together
    padded = np.zeros(len(data) + 8, dtype=np.uint8)
    padded[: len(data)] = data
    words = np.ndarray((len(data),), dtype="<u8", buffer=padded, strides=(1,))[begins]
    words &= _KEEP[np.minimum(width, 8)]
    value = _pack7(words)
    for j in (8, 9):  # a 9th and 10th byte: values beyond 2**56
        wide = np.flatnonzero(width > j)
        if len(wide):
            value[wide] |= (data[begins[wide] + j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
    return _unzigzag(value)


#: the low ``n`` bytes of a word, each without its continuation bit, n = 0 ... 8
_KEEP = np.array(
    [int.from_bytes(b"\x7f" * n + b"\x00" * (8 - n), "little") for n in range(9)],
    dtype=np.uint64,
)
_PAIRS = [
    (np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), np.uint64(1)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), np.uint64(2)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), np.uint64(4)),
]


def _pack7(words: np.ndarray) -> np.ndarray:
    """Eight 7-bit groups, one in each byte of ``words``, packed into 56 bits: neighbours
    joined in pairs, then pairs of pairs, then halves (in place: one temporary a step)."""
    for low, high, shift in _PAIRS:
        upper = words & high
        upper >>= shift
        words &= low
        words |= upper
    return words


def _floats(mantissa: np.ndarray, scale: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Values as the server's query path makes them: ``float64(m) / 10**-e`` for a negative
    exponent, ``float64(m) * 10**e`` otherwise (by 1 exactly where it is 0); the three
    special mantissas."""
    out = mantissa.astype(np.float64)
    top = len(_POW10) - 1
    one = scale[0] if (scale == scale[0]).all() else None  # one exponent: the usual case
    if one is not None and one < 0:
        out /= _POW10[min(-one, top)]
    elif (scale < 0).any():
        out /= np.repeat(_POW10[np.clip(-scale, 0, top)], rows)
    if one is not None and one > 0:
        out *= _POW10[min(one, top)]
    elif (scale > 0).any():
        out *= np.repeat(_POW10[np.clip(scale, 0, top)], rows)
    special = (mantissa >= _STALE) | (mantissa == _INF_NEG)
    if special.any():
        out[special & (mantissa == _INF_POS)] = np.inf
        out[special & (mantissa == _INF_NEG)] = -np.inf
        out[special & (mantissa == _STALE)] = np.nan
    return out


def _labels(names: list[bytes]) -> list[dict[str, str]]:
    """Series names as their labels (``__name__`` the metric's name, when it has one)."""
    if not names:
        return []
    # a 2 byte is always escaped inside a name: it can join them all for one decode
    texts = b"\x02".join(names).decode("utf-8", "replace").split("\x02")
    out = []
    for name, text in zip(names, texts, strict=True):
        parts = _unescape(name) if "\x00" in text else text.split("\x01")
        if parts[-1] != "" or len(parts) % 2:
            raise NativeFormatError(f"a series name not name and label pairs: {name[:80]!r}")
        labels = {"__name__": parts[0]} if parts[0] else {}
        labels.update(zip(parts[1:-1:2], parts[2:-1:2], strict=True))
        out.append(labels)
    return out


def _unescape(name: bytes) -> list[str]:
    """A name with escapes (a 0, 1 or 2 byte in a label) split into its parts."""
    parts = []
    for part in name.split(b"\x01"):
        out = bytearray()
        pieces = part.split(b"\x00")
        out += pieces[0]
        for piece in pieces[1:]:
            if piece[:1] not in (b"0", b"1", b"2"):
                raise NativeFormatError(f"a bad escape in a series name: {name[:80]!r}")
            out.append(piece[0] - ord("0"))
            out += piece[1:]
        parts.append(out.decode("utf-8", "replace"))
    return parts


__all__ = ["Decoded", "NativeFormatError", "decode"]
