"""smi:// — every GPU through ``nvidia-smi --query-gpu``, for hosts where NVML cannot be loaded.

    open_collector("smi://")                                   nvidia-smi on PATH, 10 s timeout
    open_collector("smi://?timeout=10&binary=/usr/bin/nvidia-smi")

Runs ``nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,<Field.smi...>
--format=csv,noheader,nounits`` once per ``collect()``. Two fields have no column there but are
in ``nvidia-smi -q -x`` (its ``-d`` sections cannot be combined with ``-x``): the PCIe replay
counter and, on newer drivers, the time held at the power cap. Every ``xml_every``-th collection
(4 by default; 0: never) also runs ``-q -x``, read by ``collectors.smi_xml``, and adds the
fields the query did not give to each GPU's sample (matched by UUID, else bus id). Energy,
NVLink errors and the thermal violation time are absent; use nvml:// for those.
The node's ``driver_version`` is asked for beside the fields, and the CUDA version it supports is
read from ``nvidia-smi -q``'s header once per driver version: both become ``Batch.nodes``.

nvidia-smi hangs on a sick GPU, so it runs under a timeout and is killed after it: the batch
names the timeout in ``problems`` and the loop goes on. ``[N/A]``, ``[Not Supported]``,
``[Unknown Error]`` and the like are absent values; ``[GPU is lost]`` and "Unable to determine
the device handle" become a ``gpu_lost`` event for that GPU, once, and ``gpu_recovered`` when it
is back. A driver that does not know a field name fails the whole query ("Field ... is not a
valid field to query"): the collector drops that name (or falls back to its older name), says so
once in ``problems``, and remembers it.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from gpuwarden.collectors._gpu_state import LOST, OK, GpuStates
from gpuwarden.collectors.base import url_options
from gpuwarden.collectors.smi_cells import is_no_value, normalise_bus_id, parse_cell
from gpuwarden.errors import CollectorTimeout, CollectorUnavailable, ConfigError
from gpuwarden.readings import screen
from gpuwarden.telemetry import FIELDS, Batch, Event, GpuId, NodeInfo, Sample

IDENTITY = ("index", "uuid", "pci.bus_id", "name")
#: Every how many collections ``nvidia-smi -q -x`` runs too (its fields the query lacks).
XML_EVERY = 4

#: Our field -> the nvidia-smi names to ask for, newest first; older drivers get the next one.
SMI_NAMES: dict[str, tuple[str, ...]] = {f.name: (f.smi,) for f in FIELDS if f.smi}
SMI_NAMES["clock_event_reasons"] += ("clocks_throttle_reasons.active",)  # before r535
#: Not a telemetry field: the node's driver version, asked for beside the fields. A driver that
#: does not know it (none seen) drops it silently; the CUDA version is then not asked for either.
DRIVER = "@driver_version"
_CUDA_LINE = re.compile(r"^CUDA Version\s*:\s*(\S.*?)\s*$", re.MULTILINE)

_BAD_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_NO_HANDLE = re.compile(
    rf"Unable to determine the device handle for (?:gpu|GPU)\s*(?P<bus>{_BUS_ID.pattern})"
)
#: How long to wait for a killed nvidia-smi to exit before leaving it behind.
_REAP_S = 2.0
_abandoned: list[subprocess.Popen[str]] = []


@dataclass(frozen=True)
class SmiOutput:
    returncode: int
    stdout: str
    stderr: str


Runner = Callable[[Sequence[str], float], SmiOutput]


def run_nvidia_smi(argv: Sequence[str], timeout_s: float) -> SmiOutput:
    """Run ``argv``; past ``timeout_s`` kill it and raise ``CollectorTimeout``.

    ``subprocess.run`` would wait for the killed process without limit, and an nvidia-smi stuck
    in the kernel on a sick GPU does not die until the driver lets go: so wait a moment, then
    leave it behind (it is reaped by a later call) rather than hang the sample loop.
    """
    _abandoned[:] = [p for p in _abandoned if p.poll() is None]
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=_REAP_S)
        except subprocess.TimeoutExpired:
            _abandoned.append(proc)
        raise CollectorTimeout(
            f"nvidia-smi did not answer within {timeout_s:g} s and was killed "
            "(a GPU or the driver may be hung)"
        ) from None
    return SmiOutput(proc.returncode, stdout, stderr)


def _is_lost(cell: str) -> bool:
    return "gpu is lost" in cell.lower()


def _resolve(binary: str) -> str:
    if os.sep in binary:
        if not os.path.isfile(binary):
            raise CollectorUnavailable(
                f"nvidia-smi not found: no file {binary}; use nvml://, dcgm+http://... or sim://"
            )
        if not os.access(binary, os.X_OK):
            raise CollectorUnavailable(f"nvidia-smi at {binary} is not executable")
        return binary
    found = shutil.which(binary)
    if found is None:
        raise CollectorUnavailable(
            f"nvidia-smi not found: {binary!r} is not on PATH (no NVIDIA driver utilities "
            "on this host); use nvml://, dcgm+http://... or sim://"
        )
    return found


class SmiCollector:
    """Every GPU through ``nvidia-smi --query-gpu``. ``run`` replaces the subprocess (tests)."""

    def __init__(
        self,
        *,
        binary: str = "nvidia-smi",
        timeout_s: float = 10.0,
        run: Runner | None = None,
        hostname: str | None = None,
        clock: Callable[[], float] = time.time,
        xml_every: int = XML_EVERY,
    ) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"smi:// timeout must be more than 0 seconds, not {timeout_s}")
        if xml_every < 0:
            raise ConfigError(f"smi:// xml_every must be 0 (never) or more, not {xml_every}")
        self.url = f"smi://?timeout={timeout_s:g}&binary={binary}"
        self.xml_every = int(xml_every)
        self._polls = 0
        self.binary = binary if run is not None else _resolve(binary)
        self.timeout_s = float(timeout_s)
        self.hostname = hostname or socket.gethostname()
        self._run = run or run_nvidia_smi
        self._clock = clock
        self._names = {field: list(names) for field, names in SMI_NAMES.items()}
        self._names[DRIVER] = ["driver_version"]
        self._driver = ""  # as nvidia-smi printed it in the last run
        self._cuda: tuple[str, str] | None = None  # (driver, CUDA version) read with -q
        self._states = GpuStates()
        self._known: dict[str, GpuId] = {}  # PCI bus id -> the GPU last seen there
        self._notes: list[str] = []  # said once, in the next batch
        self._seen: set[str] = set()  # PCI bus ids in the output being parsed

    @classmethod
    def from_url(cls, url: str) -> SmiCollector:
        """``smi://?timeout=SECONDS&binary=PATH&hostname=NAME``, every option optional."""
        if urlsplit(url).scheme != "smi":
            raise ConfigError(f"not an smi:// URL: {url!r}")
        parts, params = url_options(url, ("timeout", "binary", "hostname", "xml_every"))
        if parts.netloc or parts.path not in ("", "/"):
            raise ConfigError(
                f"{url!r}: smi:// runs nvidia-smi on this host and takes no host or path"
            )
        try:
            timeout_s = float(params.get("timeout", "10"))
        except ValueError:
            raise ConfigError(f"{url!r}: timeout must be a number of seconds") from None
        every = params.get("xml_every", str(XML_EVERY))
        if not every.isdigit():
            raise ConfigError(f"{url!r}: xml_every must be a whole number (0: never)")
        return cls(
            binary=params.get("binary") or "nvidia-smi",
            timeout_s=timeout_s,
            hostname=params.get("hostname") or None,
            xml_every=int(every),
        )

    def collect(self) -> Batch:
        """Run nvidia-smi once (again after dropping a field it does not know)."""
        ts = float(self._clock())
        for _ in range(len(self._names) + 1):
            columns = self._columns()
            argv = [
                self.binary,
                "--query-gpu=" + ",".join(name for name, _ in columns),
                "--format=csv,noheader,nounits",
            ]
            try:
                out = self._run(argv, self.timeout_s)
            except CollectorTimeout as exc:
                return Batch(ts=ts, problems=(*self._take_notes(), str(exc)))
            except OSError as exc:  # removed or made unexecutable since we started
                raise CollectorUnavailable(
                    f"cannot run {self.binary}: {exc.strerror or exc}"
                ) from exc
            bad = _BAD_FIELD.search(out.stdout + "\n" + out.stderr)
            if bad is None:
                return self._with_xml(self._parse(ts, columns, out))
            if not self._drop(bad.group(1)):
                return Batch(ts=ts, problems=(*self._take_notes(), bad.group(0)))
        raise AssertionError("unreachable: every field dropped")  # pragma: no cover

    def close(self) -> None:
        """Nothing stays open between calls."""

    def _with_xml(self, batch: Batch) -> Batch:
        """Every ``xml_every``-th collection: the fields ``nvidia-smi -q -x`` has and the query
        did not give, added to each GPU's sample; a ``-q -x`` that fails is a problem, and the
        query's samples stand."""
        self._polls += 1
        if not self.xml_every or (self._polls - 1) % self.xml_every or not batch.samples:
            return batch
        from gpuwarden.collectors.smi_xml import QueryXmlError, is_query_xml, read_query_xml

        try:
            out = self._run([self.binary, "-q", "-x"], self.timeout_s)
            if out.returncode != 0 or not is_query_xml(out.stdout):
                said = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()[0]
                raise QueryXmlError(f"exited with status {out.returncode}: {said[:200]}")
            xml = read_query_xml(out.stdout, hostname=self.hostname)
        except (CollectorTimeout, QueryXmlError, OSError) as exc:
            return replace(batch, problems=(*batch.problems, f"nvidia-smi -q -x: {exc}"))
        by_uuid = {s.gpu.uuid: s.values for s in xml.samples if s.gpu.uuid}
        by_bus = {normalise_bus_id(s.gpu.pci_bus_id): s.values for s in xml.samples}
        samples = []
        for s in batch.samples:
            found = by_uuid.get(s.gpu.uuid) or by_bus.get(s.gpu.pci_bus_id) or {}
            more = {k: v for k, v in found.items() if k not in s.values}
            samples.append(replace(s, values={**s.values, **more}) if more else s)
        return replace(batch, samples=tuple(samples))

    def _columns(self) -> list[tuple[str, str | None]]:
        columns: list[tuple[str, str | None]] = [(name, None) for name in IDENTITY]
        columns += [(names[0], field) for field, names in self._names.items() if names]
        return columns

    def _drop(self, smi_name: str) -> bool:
        """Stop asking for ``smi_name``; False when it is not one of ours to drop."""
        for field, names in self._names.items():
            if names and names[0] == smi_name:
                names.pop(0)
                if field == DRIVER:
                    return True
                instead = f"; asking for {names[0]!r} instead" if names else f"; {field} is absent"
                self._notes.append(f"nvidia-smi does not know the field {smi_name!r}{instead}")
                return True
        return False

    def _take_notes(self) -> list[str]:
        notes, self._notes = self._notes, []
        return notes

    def _parse(self, ts: float, columns: list[tuple[str, str | None]], out: SmiOutput) -> Batch:
        samples: list[Sample] = []
        events: list[Event] = []
        problems = self._take_notes()
        explained = False  # a lost GPU accounts for nvidia-smi's failing exit status
        self._seen = set()
        for line in out.stderr.splitlines():
            explained = self._no_handle(line, ts, events, problems) or explained
        for line in out.stdout.splitlines():
            if not line.strip():
                continue
            if self._no_handle(line, ts, events, problems):
                explained = True
                continue
            cells = next(csv.reader([line], skipinitialspace=True))
            if len(cells) != len(columns):
                problems.append(f"nvidia-smi: unexpected line {line.strip()!r}")
                continue
            explained = explained or any(_is_lost(c) for c in cells)
            sample = self._row(cells, columns, ts, events, problems)
            if sample is not None:
                samples.append(sample)
        if self._seen:
            # a GPU that fell off the bus can vanish from the listing altogether
            for bus, gpu in self._known.items():
                if bus not in self._seen:
                    problems.append(
                        f"gpu {gpu.index} ({gpu.uuid}) at {bus} is missing from nvidia-smi's list"
                    )
        if out.returncode != 0 and not explained:
            said = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()[0]
            problems.append(f"nvidia-smi exited with status {out.returncode}: {said}")
        nodes: tuple[NodeInfo, ...] = ()
        if self._driver:
            nodes = (NodeInfo(ts, self.hostname, self._driver, self._cuda_version(problems)),)
        return screen(
            Batch(
                ts=ts,
                samples=tuple(samples),
                events=tuple(events),
                problems=tuple(problems),
                nodes=nodes,
            )
        )

    def _cuda_version(self, problems: list[str]) -> str:
        """The CUDA version the driver supports, from ``nvidia-smi -q``'s header: read once per
        driver version (a driver update changes it), "" where it does not print one."""
        if self._cuda is not None and self._cuda[0] == self._driver:
            return self._cuda[1]
        try:
            out = self._run([self.binary, "-q", "-d", "COMPUTE"], self.timeout_s)
        except CollectorTimeout as exc:
            problems.append(f"CUDA version not read: {exc}")
            return ""  # asked again next time
        except OSError:
            return ""
        match = _CUDA_LINE.search(out.stdout) if out.returncode == 0 else None
        cuda = match.group(1) if match and not match.group(1).startswith(("N/A", "[")) else ""
        self._cuda = (self._driver, cuda)
        return cuda

    def _row(
        self,
        cells: list[str],
        columns: list[tuple[str, str | None]],
        ts: float,
        events: list[Event],
        problems: list[str],
    ) -> Sample | None:
        index_s, uuid, bus_id, name = (c.strip() for c in cells[: len(IDENTITY)])
        bus = normalise_bus_id(bus_id) if _BUS_ID.fullmatch(bus_id) else ""
        known = self._known.get(bus)
        gpu = GpuId(
            hostname=self.hostname,
            index=int(index_s) if index_s.isdigit() else (known.index if known else -1),
            uuid=uuid if uuid.startswith("GPU-") else (known.uuid if known else ""),
            pci_bus_id=bus,
            model=name if not name.startswith("[") else (known.model if known else ""),
        )
        if gpu.uuid and bus:
            self._known[bus] = gpu
        self._seen.add(bus)
        label = f"gpu {gpu.index} ({gpu.uuid})" if gpu.uuid else f"gpu {gpu.index}"
        values: dict[str, float] = {}
        for (smi_name, field), cell in zip(columns, cells, strict=True):
            if field is None:
                continue
            if field == DRIVER:
                text = cell.strip()
                self._driver = "" if is_no_value(text) else text
                continue
            try:
                value = parse_cell(cell)
            except ValueError:
                problems.append(f"{label}: cannot read {smi_name}={cell.strip()!r}")
                continue
            if value is not None:
                values[field] = value
        lost = next((c.strip() for c in cells if _is_lost(c)), None)
        key = bus or f"index:{gpu.index}"
        if lost is not None:
            problems.append(f"{label}: nvidia-smi says {lost}")
        event = self._states.observe(
            key, gpu, LOST if lost else OK, ts, f"nvidia-smi: {lost}" if lost else ""
        )
        if event is not None:
            events.append(event)
        return Sample(ts=ts, gpu=gpu, values=values) if values else None

    def _no_handle(self, line: str, ts: float, events: list[Event], problems: list[str]) -> bool:
        """Handle "Unable to determine the device handle for GPU<bus>: ..."; False for other lines.

        nvidia-smi prints it instead of the GPU's row, so the GPU is known only by its PCI bus
        id: take the identity last seen at that address.
        """
        match = _NO_HANDLE.search(line)
        if match is None:
            return False
        bus = normalise_bus_id(match["bus"])
        self._seen.add(bus)
        gpu = self._known.get(bus) or GpuId(self.hostname, -1, "", pci_bus_id=bus)
        problems.append(line.strip())
        event = self._states.observe(bus, gpu, LOST, ts, line.strip())
        if event is not None:
            events.append(event)
        return True
