"""Property test: ``_promtext.parse_text`` reads every valid exposition body exactly as
``prometheus_client.parser.text_string_to_metric_families`` does, and a line the library
rejects is skipped and counted (``ParseResult.bad_lines``), never a crash."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.collectors._promtext import parse_text

_NAME = st.from_regex(r"\A[a-zA-Z_:][a-zA-Z0-9_:]{0,20}\Z")
# label names starting "__" are reserved, but both parsers read them; keep to the common case
_LABEL = st.from_regex(r"\A[a-zA-Z][a-zA-Z0-9_]{0,12}\Z")
_TEXT = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from('\\"\n'),
    max_size=12,
)
_FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def _value_text(draw: st.DrawFn) -> str:
    x = draw(_FLOATS)
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return draw(st.sampled_from(["NaN", "nan"]))
    if math.isinf(x):
        return draw(st.sampled_from(["+Inf", "Inf", "+inf"])) if x > 0 else "-Inf"
    return draw(st.sampled_from([repr(x), f"{x:e}", f"{x:.3E}", f"{x:g}"]))


@st.composite
def _family(draw: st.DrawFn) -> str:
    name = draw(_NAME)
    lines = []
    if draw(st.booleans()):
        lines.append(f"# HELP {name} {_escape(draw(_TEXT)).replace(chr(34), 'q')}")
    if draw(st.booleans()):
        lines.append(f"# TYPE {name} {draw(st.sampled_from(['gauge', 'untyped']))}")
    for _ in range(draw(st.integers(1, 3))):
        labels = draw(st.dictionaries(_LABEL, _TEXT, max_size=4))
        block = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        if labels and draw(st.booleans()):
            block += ","  # a trailing comma is allowed
        head = f"{name}{{{block}}}" if labels or draw(st.booleans()) else name
        ts = draw(st.none() | st.integers(-(10**13), 10**13))
        tail = "" if ts is None else f" {ts}"
        lines.append(f"{head} {draw(_value_text())}{tail}")
    return "\n".join(lines)


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _library(body: str) -> list[tuple[str, dict[str, str], float, float | None]]:
    return [
        (s.name, dict(s.labels), s.value, None if s.timestamp is None else float(s.timestamp))
        for fam in text_string_to_metric_families(body)
        for s in fam.samples
    ]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_family(), min_size=1, max_size=4))
@example(['DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="n\\\\1\\"x\\n"} 41 1700000000000'])
def test_valid_bodies_read_as_prometheus_client_reads_them(families: list[str]) -> None:
    body = "\n".join(families) + "\n"
    want = _library(body)
    got = parse_text(body)
    assert got.bad_lines == []
    assert len(got.samples) == len(want)
    for ours, theirs in zip(got.samples, want, strict=True):
        assert (ours.name, dict(ours.labels)) == theirs[:2]
        # the library keeps integers as int; ours are float64 (what a store keeps)
        assert _same(ours.value, float(theirs[2])), (ours.value, theirs[2])
        ts = None if ours.timestamp_ms is None else ours.timestamp_ms / 1000
        assert ts == theirs[3] or (ts is not None and math.isclose(ts, theirs[3] or 0.0))


_JUNK = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\n\r"))


@settings(max_examples=400, deadline=None)
@given(_JUNK | st.builds("{}{{{}}} {}".format, _NAME, _JUNK, _JUNK))
@example('DCGM_FI_DEV_NAME{gpu="0"} Tesla T4')
@example('m{a="1"} 1 2 3')
@example("m{a=1} 1")
def test_a_line_the_library_rejects_is_skipped_and_counted(line: str) -> None:
    try:
        _library(line + "\n")
    except Exception:
        rejected = True
    else:
        rejected = False
    got = parse_text(f"ok 1\n{line}\nok 2\n")  # never raises; the good lines around it stay
    assert [s.value for s in got.samples if s.name == "ok"][:1] == [1.0]
    if rejected and line.strip() and not line.lstrip().startswith("#"):
        assert got.bad_lines == [line.strip()]
