"""The line protocol reader on InfluxData's documented forms: escapes, types, times, errors."""

from __future__ import annotations

import pytest

from gpuwarden.collectors.lineproto import Point, parse_line
from gpuwarden.errors import InputError


def test_escapes_types_and_precision():
    p = parse_line(
        r'my\ gpu\,metrics,host=node\ 7,pod\=x=a\,b str="say \"hi\" \\ ok",f=1.5,i=-3i,'
        r"u=7u,e=2e3,yes=t,no=FALSE 1714564800000",
        "ms",
    )
    assert p == Point(
        "my gpu,metrics",
        {"host": "node 7", "pod=x": "a,b"},
        {"str": 'say "hi" \\ ok', "f": 1.5, "i": -3, "u": 7, "e": 2000.0, "yes": True,
         "no": False},
        1_714_564_800.0,
    )  # fmt: skip


def test_a_space_or_comma_inside_a_quoted_string_is_not_a_separator():
    p = parse_line('nvidia_smi,index=0 display_mode="Requested functionality, deprecated" 1')
    assert p is not None and p.fields == {"display_mode": "Requested functionality, deprecated"}
    assert p.ts == 1e-9


def test_a_line_without_time_has_none_and_comments_are_skipped():
    p = parse_line("nvidia_smi,index=0 temperature_gpu=40i")
    assert p is not None and p.ts is None
    assert parse_line("# a comment") is None and parse_line("   ") is None


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("nvidia_smi", "a line is a measurement and tags, fields"),
        ("nvidia_smi,index temperature_gpu=4i 1", "tag 'index' is not key=value"),
        ("nvidia_smi temperature_gpu 1", "field 'temperature_gpu' is not key=value"),
        ("nvidia_smi temperature_gpu=hot 1", "'hot' is not a number, boolean or string"),
        ('nvidia_smi name="open 1', "no closing quote"),
        ("nvidia_smi temperature_gpu=4i soon", "time 'soon' is not an integer"),
        ("nvidia_smi t=-1u 1", "'-1u' is not a number"),
        (",index=0 t=1 1", "no measurement name"),
    ],
)
def test_what_does_not_read_is_named(line, message):
    with pytest.raises(InputError, match=message):
        parse_line(line)


def test_an_unknown_precision_is_refused():
    with pytest.raises(InputError, match="precision must be one of ns, us, ms, s"):
        parse_line("m f=1 1", "minutes")
