"""Xids from the kernel log: the ``NVRM: Xid`` and NVSwitch ``SXid`` lines, and ``kmsg://``.

    parse_line("[6781741.548779] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', ...")
    open_collector("kmsg://")                                   this host's /dev/kmsg, followed
    open_collector("kmsg:///var/log/kern.log?boot_time=...")     a saved log, replayed

The driver writes one line per Xid, ``NVRM: Xid (PCI:0000:cb:00): 13, pid=..., name=..., text``
(drivers before about r450: ``NVRM: Xid (0000:03:00): 13, text``), and the NVSwitch driver one
per SXid, ``nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, text``. The line's time comes
from whatever wrote the log: a ``/dev/kmsg`` record, ``dmesg`` (seconds since boot),
``dmesg -T`` / ``--ctime``, ``dmesg --time-format iso`` (with or without ``--decode``), syslog,
``journalctl -o short`` / ``short-precise`` / ``short-iso``. Naive wall-clock stamps (syslog,
``dmesg -T``) are read in ``tz`` (UTC by default); syslog's year is the latest one that does
not put the line in the future.

An Xid is filed under the GPU at its PCI address (``GpuDirectory``). An SXid names a switch,
not a GPU: it is an ``sxid`` event on the switch's own record (``switch_id``: index -1, uuid
``nvswitch:HOST:BUS``, model ``NVSwitch``), so it never counts against a GPU. An Xid whose
address matches no known GPU is an ``xid_unmatched`` event on ``pci_id`` (index -1, uuid
``pci:HOST:BUS``): kept and reported, never guessed onto a GPU and never a hard signal.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from urllib.parse import unquote

from gpuwarden.collectors.base import url_options
from gpuwarden.errors import CollectorUnavailable, ConfigError
from gpuwarden.telemetry import Batch, Event, GpuId, canonical_pci_bus_id

DEV_KMSG = "/dev/kmsg"
#: Longest detail kept from a line (GSP lines run long).
MAX_DETAIL = 400


class KernelLineError(ValueError):
    """A line that is an Xid or SXid line but whose parts do not read."""


@dataclass(frozen=True)
class KernelXid:
    """One Xid or SXid line. ``ts``: wall-clock Unix seconds, None when the line has only
    seconds since boot (``since_boot``) and no boot time was given, or no stamp at all.
    ``host``: the host the line names (syslog, journald), "" for dmesg. ``bus_id``: canonical
    (``canonical_pci_bus_id``). ``detail``: the text after the code (pid, name, message)."""

    kind: str  # "xid" or "sxid"
    code: int
    bus_id: str
    detail: str
    ts: float | None
    since_boot: float | None = None
    host: str = ""
    device: str = ""  # the switch ("nvidia-nvswitch0") for an SXid
    stamp: str = ""  # the time prefix as written, for messages


_MARK = re.compile(r"\bS?Xid \(")
_MSG = re.compile(
    r"(?:NVRM: (?P<xid>Xid)|(?:(?P<dev>[\w.-]+): )?(?P<sxid>SXid)) "
    r"\((?:PCI:)?(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]+(?::[0-9A-Fa-f]+)?(?:\.[0-7])?)"
    r"(?P<extra>[^)]*)\):\s*(?P<code>[^,\s]*)\s*(?:,\s*(?P<rest>.*))?$"
)
_KMSG_RECORD = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;")
_DECODE = re.compile(r"^[a-z]+\s*:\s*[a-z]+\s*:\s*")  # dmesg --decode: "kern  :warn  : "
_ISO = re.compile(
    r"^(?P<iso>\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"(?:\s+(?P<host>\S+)\s+kernel:)?"
)
_SYSLOG = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<hms>\d{2}:\d{2}:\d{2})(?P<frac>\.\d+)?"
    r"\s+(?P<host>\S+)\s+kernel:"
)
_CTIME = re.compile(
    r"^\[(?P<wd>[A-Z][a-z]{2})\s+(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+"
    r"(?P<hms>\d{2}:\d{2}:\d{2})\s+(?P<year>\d{4})\]"
)
_UPTIME = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]")
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


_GPU_NOTICE = re.compile(
    r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+(?:\.[0-7])?)"
)
_FALLEN = "fallen off the bus"


class FallenOffBus:
    """The driver's "GPU has fallen off the bus" notice when it comes WITHOUT an Xid line.

    Recent drivers (seen with 570.158.01, tests/data/kmsg/real/) write it over several lines,
    the bus id on the first and the words two lines later, continuation lines unstamped::

        [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
                       NVRM: (PCI ID: 10de:26b5) installed in this system has
                       NVRM: fallen off the bus and is not responding to commands.

    ``feed`` takes every line in order and returns an Xid 79 (``KernelXid``, time from the
    first line) when such a notice completes; one line naming both also counts. Older drivers
    print the notice right after their own Xid 79 line: a notice within ``WINDOW`` lines of an
    Xid 79 for the same GPU is that Xid again, not a second fault."""

    WINDOW = 3  # lines after the bus id within which the words must follow

    def __init__(self) -> None:
        self._open: tuple[str, str, int] | None = None  # (bus, prefix of the first line, age)
        self._xid79: tuple[str, int] | None = None  # (canonical bus, lines since)

    def feed(
        self,
        line: str,
        *,
        boot_time: float | None = None,
        tz: tzinfo = UTC,
        now: float | None = None,
    ) -> KernelXid | None:
        if self._xid79 is not None:
            bus79, since79 = self._xid79
            self._xid79 = (bus79, since79 + 1) if since79 < self.WINDOW else None
        if is_xid_line(line):
            self._open = None
            said = _MSG.search(line)
            if said is not None and said.group("xid") and said.group("code") == "79":
                try:
                    self._xid79 = (canonical_pci_bus_id(said.group("bus")), 0)
                except ValueError:
                    pass
            return None
        notice = _GPU_NOTICE.search(line)
        if notice is not None:
            self._open = (notice.group("bus"), line[: notice.start()], 0)
        elif self._open is not None:
            bus, prefix, age = self._open
            self._open = (bus, prefix, age + 1) if age + 1 <= self.WINDOW else None
        if self._open is None or _FALLEN not in line:
            return None
        bus, prefix, _ = self._open
        self._open = None
        try:
            canonical = canonical_pci_bus_id(bus)
        except ValueError:
            return None
        if self._xid79 is not None and self._xid79[0] == canonical:
            return None  # the driver's words after its own Xid 79 line
        ts, since, host, stamp = _stamp(prefix, boot_time, tz, now)
        return KernelXid(
            kind="xid",
            code=79,
            bus_id=canonical,
            detail="GPU has fallen off the bus (the driver's notice; no Xid line)",
            ts=ts,
            since_boot=since,
            host=host,
            stamp=stamp,
        )


def is_xid_line(line: str) -> bool:
    """Whether ``line`` carries an Xid or SXid (cheap: no parsing)."""
    return _MARK.search(line) is not None


def parse_line(
    line: str,
    *,
    boot_time: float | None = None,
    tz: tzinfo = UTC,
    now: float | None = None,
) -> KernelXid | None:
    """The Xid or SXid on ``line``, None for any other line.

    Seconds since boot (dmesg, ``/dev/kmsg``) become wall-clock time with ``boot_time`` (Unix
    s); without it ``ts`` is None. Raises ``KernelLineError`` for an Xid line that does not
    read (no bus id, a code that is not a number, a date that does not exist)."""
    line = line.rstrip("\r\n")
    mark = _MARK.search(line)
    if mark is None:
        return None
    msg = _MSG.search(line)
    if msg is None:
        raise KernelLineError("an Xid line without '(PCI:BUS): CODE'")
    try:
        bus = canonical_pci_bus_id(msg.group("bus"))
    except ValueError as exc:
        raise KernelLineError(str(exc)) from None
    code_text = msg.group("code")
    if not code_text.isdigit():
        raise KernelLineError(f"Xid code {code_text!r} is not a number")
    ts, since, host, stamp = _stamp(line[: msg.start()], boot_time, tz, now)
    extra = msg.group("extra").strip()
    detail = (msg.group("rest") or "").strip()
    if extra:  # MIG: "(PCI:0000:87:00 GPU-I:05)"
        detail = f"{extra}: {detail}" if detail else extra
    return KernelXid(
        kind="sxid" if msg.group("sxid") else "xid",
        code=int(code_text),
        bus_id=bus,
        detail=detail[:MAX_DETAIL],
        ts=ts,
        since_boot=since,
        host=host,
        device=msg.group("dev") or "",
        stamp=stamp,
    )


def _stamp(
    prefix: str, boot_time: float | None, tz: tzinfo, now: float | None
) -> tuple[float | None, float | None, str, str]:
    """(ts, seconds since boot, host, the stamp as written) from the text before the message."""
    p = prefix.strip()
    if m := _KMSG_RECORD.match(p):
        since = int(m.group(3)) / 1e6
        return _from_boot(since, boot_time), since, "", m.group(0)
    p = _DECODE.sub("", p)
    if m := _ISO.match(p):
        text = m.group("iso").replace(",", ".")
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            raise KernelLineError(f"time {m.group('iso')!r} does not exist") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=tz)
        return stamp.timestamp(), None, m.group("host") or "", m.group("iso")
    if m := _SYSLOG.match(p):
        return _syslog(m, tz, now), None, m.group("host"), m.group(0)
    if m := _CTIME.match(p):
        h, mi, sec = (int(v) for v in m.group("hms").split(":"))
        try:
            mon = _MONTHS[m.group("mon")]
            stamp = datetime(int(m.group("year")), mon, int(m.group("day")), h, mi, sec, tzinfo=tz)
        except (KeyError, ValueError):
            raise KernelLineError(f"date {m.group(0)!r} does not exist") from None
        return stamp.timestamp(), None, "", m.group(0)
    if m := _UPTIME.match(p):
        since = float(m.group("s"))
        return _from_boot(since, boot_time), since, "", m.group(0)
    return None, None, "", ""


def _from_boot(since: float, boot_time: float | None) -> float | None:
    return None if boot_time is None else boot_time + since


def _syslog(m: re.Match[str], tz: tzinfo, now: float | None) -> float:
    """A syslog date has no year: the latest year that does not put it in the future (a day
    of slack for clocks that disagree)."""
    if m.group("mon") not in _MONTHS:
        raise KernelLineError(f"month {m.group('mon')!r} is not a month")
    latest = datetime.fromtimestamp(time.time() if now is None else now, tz) + timedelta(days=1)
    h, mi, sec = (int(v) for v in m.group("hms").split(":"))
    micro = int(round(float(m.group("frac") or 0) * 1e6))
    mon, day = _MONTHS[m.group("mon")], int(m.group("day"))
    for year in (latest.year, latest.year - 1, latest.year - 4):  # -4: Feb 29
        try:
            stamp = datetime(year, mon, day, h, mi, sec, micro, tzinfo=tz)
        except ValueError:
            continue
        if stamp <= latest:
            return stamp.timestamp()
    raise KernelLineError(f"date {m.group(0)!r} does not exist")


# -- which GPU --------------------------------------------------------------------------------


def switch_id(host: str, bus_id: str) -> GpuId:
    """The record an NVSwitch's SXids are filed under: not a GPU (index -1, model NVSwitch)."""
    return GpuId(host, -1, f"nvswitch:{host}:{bus_id}", pci_bus_id=bus_id, model="NVSwitch")


def pci_id(host: str, bus_id: str) -> GpuId:
    """The record an Xid at an unknown PCI address is filed under (index -1, no GPU uuid)."""
    return GpuId(host, -1, f"pci:{host}:{bus_id}", pci_bus_id=bus_id)


class GpuDirectory:
    """GPUs by (hostname, canonical PCI bus id). Several boards that held the same slot over
    time: the one first seen last before the line's time (else the earliest). Records with
    index -1 (switches, unmatched addresses) and GPUs without a bus id are left out."""

    def __init__(self, gpus: Iterable[tuple[GpuId, float]] = ()) -> None:
        self._by_slot: dict[tuple[str, str], list[tuple[float, GpuId]]] = {}
        for gpu, first_ts in gpus:
            self.add(gpu, first_ts)

    def add(self, gpu: GpuId, first_ts: float = float("-inf")) -> None:
        if gpu.index < 0 or not gpu.pci_bus_id or not gpu.uuid:
            return
        try:
            bus = canonical_pci_bus_id(gpu.pci_bus_id)
        except ValueError:
            return
        slot = self._by_slot.setdefault((gpu.hostname, bus), [])
        slot.append((first_ts, gpu))
        slot.sort(key=lambda pair: pair[0])

    @classmethod
    def from_frame(cls, frame) -> GpuDirectory:  # frame: Store.gpus()
        """From ``Store.gpus()`` (hostname, gpu, uuid, pci_bus_id, model, rack, first_ts)."""
        out = cls()
        for row in frame.itertuples(index=False):
            gpu = GpuId(
                str(row.hostname), int(row.gpu), str(row.uuid), str(row.pci_bus_id),
                str(row.model), str(row.rack),
            )  # fmt: skip
            out.add(gpu, float(row.first_ts))
        return out

    def find(self, host: str, bus_id: str, ts: float | None = None) -> GpuId | None:
        slot = self._by_slot.get((host, bus_id))
        if not slot:
            return None
        if ts is not None:
            before = [gpu for first, gpu in slot if first <= ts]
            if before:
                return before[-1]
        return slot[0][1]

    def __len__(self) -> int:
        return sum(len(s) for s in self._by_slot.values())


def to_event(x: KernelXid, ts: float, host: str, gpus: GpuDirectory) -> Event:
    """The event a parsed line becomes: ``xid`` on its GPU, ``xid_unmatched`` on the PCI
    address, ``sxid`` on the switch."""
    if x.kind == "sxid":
        where = f"{x.device} " if x.device else ""
        return Event(ts, switch_id(host, x.bus_id), "sxid", x.code, f"{where}{x.detail}".strip())
    gpu = gpus.find(host, x.bus_id, ts)
    if gpu is None:
        detail = f"PCI {x.bus_id}: {x.detail}".rstrip(": ")
        return Event(ts, pci_id(host, x.bus_id), "xid_unmatched", x.code, detail)
    return Event(ts, gpu, "xid", x.code, x.detail)


# -- the live collector -------------------------------------------------------------------


def host_gpus(
    hostname: str,
    gpus: Iterable[GpuId] | None,
    nvml: Callable[[str], list[GpuId]],
    notes: list[str],
) -> GpuDirectory:
    """The GPUs a live Xid collector matches PCI addresses to: ``gpus``, or by default this
    host's, asked of NVML once; without NVML none, and a note in ``notes`` saying so."""
    if gpus is None:
        try:
            gpus = nvml(hostname)
        except CollectorUnavailable as exc:
            gpus = []
            notes.append(f"{exc}: Xids cannot be matched to GPUs and are kept as xid_unmatched")
    return GpuDirectory((g, float("-inf")) for g in gpus)


class LineEvents:
    """Kernel-log lines as events, one line at a time, for a live collector: the driver's
    multi-line "fallen off the bus" notice (``FallenOffBus``), Xid and SXid lines, each filed
    under ``hostname`` (a line that names its own host keeps it, with ``line_host``); PCI
    addresses that match no GPU are said once per ``unmatched()``. ``boot_time``: called for
    a line stamped in seconds since boot."""

    def __init__(
        self,
        hostname: str,
        gpus: GpuDirectory,
        source: str,
        *,
        boot_time: Callable[[], float] | None = None,
        line_host: bool = True,
    ) -> None:
        self.hostname, self.gpus, self.source = hostname, gpus, source
        self.boot_time, self.line_host = boot_time, line_host
        self._fallen = FallenOffBus()
        self._unmatched: set[str] = set()

    def feed(self, line: str, now: float, problems: list[str]) -> Event | None:
        notice = self._fallen.feed(line, now=now)
        if not is_xid_line(line) and notice is None:
            return None
        try:
            x = notice or parse_line(line, now=now)
            if x is not None and x.ts is None and x.since_boot is not None and self.boot_time:
                x = replace(x, ts=self.boot_time() + x.since_boot)
        except (KernelLineError, CollectorUnavailable) as exc:
            problems.append(f"{self.source}: {exc}: {line.strip()[:200]}")
            return None
        if x is None:
            return None
        host = (x.host if self.line_host else "") or self.hostname
        event = to_event(x, now if x.ts is None else x.ts, host, self.gpus)
        if event.kind == "xid_unmatched":
            self._unmatched.add(x.bus_id)
        return event

    def unmatched(self) -> list[str]:
        """The PCI addresses met since the last call that match no GPU, as problems."""
        said = [
            f"Xid at PCI {b} matches no GPU on {self.hostname}" for b in sorted(self._unmatched)
        ]
        self._unmatched.clear()
        return said


def boot_time_from_proc(path: str = "/proc/stat") -> float:
    """This host's boot time (Unix s): ``btime`` in ``/proc/stat``."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError) as exc:
        raise CollectorUnavailable(f"cannot read the boot time from {path}: {exc}") from exc
    raise CollectorUnavailable(f"{path} has no btime line")


def nvml_gpus(hostname: str) -> list[GpuId]:
    """This host's GPUs with their PCI bus ids, through NVML; raises CollectorUnavailable."""
    try:
        from gpuwarden.collectors import libnvml
    except ImportError as exc:  # nvidia-ml-py not installed
        raise CollectorUnavailable(f"NVML not available ({exc})") from exc
    return libnvml.list_gpus(libnvml.real_module(), hostname)


class KmsgCollector:
    """Xid and SXid events from ``/dev/kmsg`` (or a file of kernel log lines, replayed and then
    followed like ``tail -f``). Every ``collect()`` reads what arrived since the last one
    without waiting (``/dev/kmsg`` is opened non-blocking; a file read stops at its end).

    ``gpus``: the GPUs to match PCI addresses to; by default this host's, asked of NVML once
    (without NVML every Xid is ``xid_unmatched``, said once in problems). ``boot_time``: for
    seconds-since-boot stamps; by default ``/proc/stat``'s ``btime`` (right for ``/dev/kmsg``;
    give it for a file from another boot). ``tail``: start at the end (skip the records
    already in the ring buffer); by default they are read, and the store keeps an event
    already stored once.
    """

    def __init__(
        self,
        path: str = DEV_KMSG,
        *,
        hostname: str | None = None,
        boot_time: float | None = None,
        gpus: Iterable[GpuId] | None = None,
        tail: bool = False,
        clock: Callable[[], float] = time.time,
        url: str | None = None,
        nvml: Callable[[str], list[GpuId]] = nvml_gpus,
    ) -> None:
        self.path = path
        self.url = url or ("kmsg://" if path == DEV_KMSG else f"kmsg://{path}")
        self.hostname = hostname or socket.gethostname()
        self.clock = clock
        self._boot_time = boot_time
        self._notes: list[str] = []
        self.gpus = host_gpus(self.hostname, gpus, nvml, self._notes)
        self._lines = LineEvents(self.hostname, self.gpus, path, boot_time=self.boot_time)
        self._device = _is_char_device(path)
        try:
            flags = os.O_RDONLY | (os.O_NONBLOCK if self._device else 0)
            self._fd: int | None = os.open(path, flags)
        except OSError as exc:
            raise CollectorUnavailable(f"cannot open {path}: {exc.strerror or exc}") from exc
        if tail:
            os.lseek(self._fd, 0, os.SEEK_END)
        self._partial = b""

    @classmethod
    def from_url(cls, url: str) -> KmsgCollector:
        """``kmsg://`` (/dev/kmsg) or ``kmsg:///path/to/file``; options ``hostname=``,
        ``boot_time=`` (Unix s), ``tail=1``."""
        parts, params = url_options(url, ("hostname", "boot_time", "tail"))
        path = unquote(parts.netloc + parts.path) or DEV_KMSG
        boot = params.get("boot_time", "")
        try:
            boot_time = float(boot) if boot else None
        except ValueError:
            raise ConfigError(f"{url!r}: boot_time={boot!r} is not Unix seconds") from None
        return cls(
            path,
            hostname=params.get("hostname") or None,
            boot_time=boot_time,
            tail=params.get("tail", "0") in ("1", "true", "yes"),
            url=url,
        )

    def boot_time(self) -> float:
        if self._boot_time is None:
            self._boot_time = boot_time_from_proc()
        return self._boot_time

    def _read_lines(self, problems: list[str]) -> list[str]:
        assert self._fd is not None
        lines: list[str] = []
        while True:
            try:
                chunk = os.read(self._fd, 8192)
            except BlockingIOError:
                break  # /dev/kmsg: nothing more now
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before we read them
                    problems.append(f"{self.path}: kernel ring buffer overran; records were lost")
                    continue
                problems.append(f"{self.path}: read failed: {exc.strerror or exc}")
                break
            if not chunk:
                break
            if self._device:  # one record per read
                lines.append(chunk.decode(errors="replace"))
                continue
            data = self._partial + chunk
            *complete, self._partial = data.split(b"\n")
            lines.extend(c.decode(errors="replace") for c in complete)
        return lines

    def collect(self) -> Batch:
        now = self.clock()
        problems, self._notes = list(self._notes), []
        if self._fd is None:
            return Batch(now, problems=(f"{self.url} is closed",))
        lines = self._read_lines(problems)
        events = [e for line in lines if (e := self._lines.feed(line, now, problems)) is not None]
        problems += self._lines.unmatched()
        return Batch(now, events=tuple(events), problems=tuple(problems))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _is_char_device(path: str) -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


__all__ = [
    "DEV_KMSG",
    "GpuDirectory",
    "KernelLineError",
    "KernelXid",
    "KmsgCollector",
    "boot_time_from_proc",
    "is_xid_line",
    "parse_line",
    "FallenOffBus",
    "pci_id",
    "switch_id",
    "to_event",
]
