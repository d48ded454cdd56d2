"""Property test of the exporter's text: whatever labels and values the collector hands it, the
rendered /metrics parses with prometheus_client's parser, its label values read back as given,
and no NaN, infinity, DCGM sentinel or impossible reading is ever exported as a value."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.exporter import Exporter
from gpuwarden.readings import SENTINELS, reason
from gpuwarden.telemetry import FIELDS, Batch, Event, GpuId, Sample

_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from('\\"\n\r{}=,# '),
    max_size=12,
)
_MODELS = st.sampled_from(["NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A10G", ""]) | _TEXT
_BY_DCGM = {f.dcgm: f for f in FIELDS}
_SENTINELS = [v for family in SENTINELS.values() for v in family.values()]
_VALUES = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([*_SENTINELS, 2.0**63, -300.0, 1e308, 0.0, 41.0])
    | st.integers(-(2**64), 2**64).map(float)
)
_GPUS = st.builds(
    GpuId,
    hostname=_TEXT,
    index=st.integers(0, 2**40),
    uuid=_TEXT,
    pci_bus_id=_TEXT,
    model=_MODELS,
)


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    gpus = draw(st.lists(_GPUS, min_size=0, max_size=4))
    names = [f.name for f in FIELDS]
    samples = tuple(
        Sample(
            ts=1.0, gpu=g, values=draw(st.dictionaries(st.sampled_from(names), _VALUES, max_size=6))
        )  # fmt: skip
        for g in gpus
    )
    events = tuple(
        Event(
            ts=1.0,
            gpu=draw(st.sampled_from(gpus)),
            kind=draw(st.sampled_from(["xid", "gpu_lost"])),
            code=draw(st.integers(0, 2**31)),
        )  # fmt: skip
        for _ in range(draw(st.integers(0, 3) if gpus else st.just(0)))
    )
    return Batch(ts=1.0, samples=samples, events=events,
                 problems=tuple(draw(st.lists(_TEXT, max_size=2))))  # fmt: skip


class _Scripted:
    def __init__(self, url: str, steps: list[Batch]) -> None:
        self.url = url
        self.steps = list(steps)

    def collect(self) -> Batch:
        return self.steps.pop(0)

    def close(self) -> None:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=_TEXT, steps=st.lists(batches(), min_size=1, max_size=3))
def test_any_collection_renders_parseable_text_with_only_possible_values(url, steps):
    exporter = Exporter(_Scripted(url, steps))  # type: ignore[arg-type]
    for _ in steps:
        exporter.poll_once()
    text = exporter.render().decode("utf-8")
    labelled = {
        (g.hostname, g.uuid, g.model) for b in steps for s in b.samples for g in [s.gpu]
    } | {(e.gpu.hostname, e.gpu.uuid, e.gpu.model) for b in steps for e in b.events}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            assert math.isfinite(s.value), (s, text)
            field = _BY_DCGM.get(s.name)
            if field is not None:  # a reading: possible for the board it names, never the
                # sentinel of the field's DCGM type (readings.reason says which are)
                assert reason(field, s.value, s.labels.get("modelName", "")) is None, s
            if "gpu" in s.labels:  # a GPU's labels read back as the collector gave them
                gpu = (s.labels.get("Hostname", ""), s.labels.get("UUID", ""),
                       s.labels.get("modelName", ""))  # fmt: skip
                assert gpu in labelled, (s.labels, labelled)
            if "collector" in s.labels:
                assert s.labels["collector"] == url
