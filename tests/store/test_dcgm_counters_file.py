"""deploy/dcgm-exporter/gpuwarden-counters.csv enables everything the model reads, in
dcgm-exporter's format, with the type the catalogue gives each field."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.signals import COUNTERS_FILE, SIGNALS
from gpuwarden.telemetry import DCGM_XID_COUNT_METRIC, DCGM_XID_METRIC, FIELDS

ROOT = Path(__file__).resolve().parents[2]


def _lines(commented: bool) -> dict[str, str]:
    """metric -> type, of the enabled lines (or, ``commented``, of the commented-out ones)."""
    out = {}
    for line in (ROOT / COUNTERS_FILE).read_text().splitlines():
        text = line.strip()
        if commented:
            if not text.startswith("# DCGM_"):
                continue
            text = text[2:]
        elif not text or text.startswith("#"):
            continue
        name, kind, help_ = (part.strip() for part in text.split(",", 2))
        assert name and kind in ("gauge", "counter", "label") and help_, line
        out[name] = kind
    return out


def test_every_signal_the_model_reads_is_enabled() -> None:
    enabled = _lines(commented=False)
    for signal in SIGNALS:
        assert all(m in enabled for m in signal.metrics), signal.name


def test_every_catalogue_field_is_there_with_its_type() -> None:
    enabled, later = _lines(commented=False), _lines(commented=True)
    for f in FIELDS:
        kind = enabled.get(f.dcgm) or later.get(f.dcgm)
        assert kind == f.kind, f"{f.dcgm}: {kind} in the file, {f.kind} in the catalogue"
        if f.dcgm.startswith("DCGM_EXP_"):  # dcgm-exporter 4.x only
            assert f.dcgm in later
    assert enabled[DCGM_XID_METRIC] == "gauge" and DCGM_XID_COUNT_METRIC in later
