"""``influxdb://``: the URL, the token, errors in one line, retries and batching, line protocol
escaping, and the annotated CSV reader, against the fake InfluxDB 2 server (``influx2_fake``)
driven by the real influxdb-client. The store contract is test_conformance_influxdb.py."""

from __future__ import annotations

import logging
import math
import socket
import time
from types import SimpleNamespace

import numpy as np
import pytest
from influx2_fake import FakeInflux, parse_line
from test_conformance_influxdb import open_influx

from gpuwarden.errors import ConfigError, InputError, StoreError
from gpuwarden.health import GpuState, Reason, Verdict
from gpuwarden.store import _flux, _lines, open_store
from gpuwarden.store.influxdb import InfluxStore
from gpuwarden.telemetry import Batch, Event, GpuId, Sample

T0 = 1_714_564_800.0
A = GpuId("node1", 0, "GPU-aaaa", "00000000:1B:00.0", "H100", "rack1")


@pytest.fixture
def fake():
    server = FakeInflux().start()
    yield server
    server.stop()


def writes(fake: FakeInflux) -> list[int]:
    return [status for method, path, status in fake.requests if path == "/api/v2/write"]


# -- the URL and the token -------------------------------------------------------------------


def test_opens_by_url_with_its_parameters(monkeypatch):
    monkeypatch.setenv("GPUWARDEN_INFLUX_TOKEN", "tok")
    store = open_store(
        "influxdb://influx.example:9999?org=ops&bucket=gpu&timeout=5&retries=0&batch=10&chunk=6h"
    )
    assert isinstance(store, InfluxStore)
    c = store.config
    assert (c.base, c.org, c.bucket, c.timeout_s, c.retries, c.batch_lines, c.chunk_s) == (
        "http://influx.example:9999", "ops", "gpu", 5.0, 0, 10, 21600.0,
    )  # fmt: skip
    store.close()
    tls = open_store("influxdb+https://influx.example?org=ops&bucket=gpu")
    assert tls.config.base == "https://influx.example:8086"
    tls.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("influxdb://h:8086?org=ops", "give bucket="),
        ("influxdb://h:8086?bucket=gpu", "give org="),
        ("influxdb://h:8086?org=o&bucket=b&tokn=x", "unknown parameter 'tokn'"),
        ("influxdb://h:8086?org=o&bucket=b&batch=lots", "batch must be a whole number"),
        ("influxdb://?org=o&bucket=b", "no host"),
        ("influxdb://h:notaport?org=o&bucket=b", "not a usable URL"),
    ],
)
def test_a_bad_url_is_one_clear_line(url, says):
    with pytest.raises(ConfigError, match=says) as err:
        open_store(url)
    assert "\n" not in str(err.value)


def test_credentials_in_the_url_are_refused_and_masked():
    with pytest.raises(ConfigError) as err:
        open_store("influxdb://admin:s3cret@h:8086?org=o&bucket=b")
    assert "s3cret" not in str(err.value) and "GPUWARDEN_INFLUX_TOKEN" in str(err.value)


def test_the_token_comes_from_the_environment(fake, monkeypatch):
    url = f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu"
    monkeypatch.delenv("GPUWARDEN_INFLUX_TOKEN", raising=False)
    monkeypatch.setenv("INFLUX_TOKEN", fake.token)
    with InfluxStore(url) as store:
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    monkeypatch.setenv("GPUWARDEN_INFLUX_TOKEN", "wrong")  # gpuwarden's own variable wins
    with InfluxStore(url) as store, pytest.raises(StoreError, match="refused the token"):
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))


def test_a_refused_token_is_one_line_and_never_shown(fake, caplog):
    caplog.set_level(logging.DEBUG)
    url = f"influxdb://{fake.url.removeprefix('http://')}?org=gpuwarden&bucket=gpu"
    store = InfluxStore(url, token="sup3r-secret-token")  # what the server refuses
    with pytest.raises(StoreError) as err:
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    text = str(err.value)
    assert "401" in text and "GPUWARDEN_INFLUX_TOKEN" in text and "\n" not in text
    assert "sup3r-secret-token" not in text and "sup3r-secret-token" not in caplog.text
    with pytest.raises(StoreError, match="refused the token"):
        store.read_samples()
    store.close()


def test_an_unknown_bucket_says_so(fake):
    store = open_influx(fake, bucket="nope")
    with pytest.raises(StoreError, match='bucket "nope" not found'):
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    store.close()


def test_a_server_that_is_not_there_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens
    store = InfluxStore(
        f"influxdb://127.0.0.1:{port}?org=o&bucket=b&retries=1&timeout=2", token="t"
    )
    with pytest.raises(StoreError, match="cannot reach http://127.0.0.1") as err:
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    assert "\n" not in str(err.value) and "Connection refused" in str(err.value)
    with pytest.raises(StoreError, match="cannot reach"):
        store.gpus()
    store.close()


# -- retries and batches ---------------------------------------------------------------------


def test_5xx_is_retried_with_backoff_then_written(fake):
    store = open_influx(fake)
    fake.fail(2, 503)
    store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    assert writes(fake) == [503, 503, 204]
    fake.fail(1, 502)
    assert store.read_samples(fields=["gpu_temp_c"])["gpu_temp_c"].tolist() == [40.0]
    store.close()


def test_429_waits_for_retry_after(fake):
    store = open_influx(fake)
    fake.fail(1, 429, retry_after="1")
    started = time.monotonic()
    store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    assert time.monotonic() - started >= 0.9
    assert writes(fake) == [429, 204]
    store.close()


def test_a_server_that_keeps_failing_gives_up_in_one_line(fake):
    store = open_influx(fake, retries="1")
    fake.fail(5, 503)
    with pytest.raises(StoreError, match="answered 503") as err:
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    assert "\n" not in str(err.value) and writes(fake) == [503, 503]
    store.close()


def test_writes_go_in_batches_of_the_urls_size(fake):
    store = open_influx(fake, batch="4")
    samples = tuple(Sample(T0 + k, A, {"gpu_temp_c": 40.0 + k}) for k in range(10))
    store.write_batch(Batch(T0, samples))  # 1 inventory line (first = last? no: 2) + 10
    assert writes(fake) == [204, 204, 204]
    assert len(store.read_samples(fields=["gpu_temp_c"])) == 10
    store.close()


def test_a_point_the_server_refuses_is_an_input_error(fake):
    store = open_influx(fake)
    fake.write("gpu", 'gpuwarden_sample,gpu=0,hostname=node1,uuid=GPU-x gpu_temp_c="hot" 1', "us")
    with pytest.raises(InputError, match="field type conflict") as err:
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": 40.0}),)))
    assert "\n" not in str(err.value)
    store.close()


def test_an_infinite_reading_is_refused_before_anything_is_sent(fake):
    store = open_influx(fake)
    with pytest.raises(InputError, match="gpu_temp_c"):
        store.write_batch(Batch(T0, (Sample(T0, A, {"gpu_temp_c": math.inf}),)))
    frame = store.read_samples()
    assert frame.empty and writes(fake) == []
    store.close()


def test_a_malformed_query_is_a_store_error_not_a_crash(fake):
    store = open_influx(fake)
    with pytest.raises(StoreError, match="compilation failed"):
        store._http.query('from(bucket: "gpu") |> range(start: 0) |> frobnicate()', "a test")
    store.close()


# -- line protocol ------------------------------------------------------------------------


def test_text_with_commas_spaces_quotes_and_backslashes_round_trips(fake):
    odd = GpuId("node 1,a=b", 2, "GPU=odd,1 x", "", "H100 80GB", "")
    detail = 'said "hi", path C:\\temp\\x = 1, and a\nline break'
    store = open_influx(fake)
    store.write_batch(
        Batch(T0, (Sample(T0, odd, {"gpu_temp_c": 1.5}),), (Event(T0, odd, "xid", 13, detail),))
    )
    ev = store.read_events()
    assert ev[["hostname", "gpu", "uuid", "code"]].values.tolist() == [
        ["node 1,a=b", 2, "GPU=odd,1 x", 13]
    ]
    assert ev["detail"].item() == detail.replace("\n", " ")  # a line break is stored as a space
    assert store.gpus()["model"].tolist() == ["H100 80GB"]
    assert store.read_samples(uuids=[odd.uuid])["gpu_temp_c"].tolist() == [1.5]
    store.close()


def test_lines_parse_as_the_line_protocol_reference_says():
    m, tags, fields, ts = parse_line(
        _lines.line(
            "m x", {"t,1": "a b=c", "empty": ""}, {"f": _lines.string('q"\\'), "n": "3i"}, 1.5
        )
    )
    assert (m, tags, fields, ts) == ("m x", {"t,1": "a b=c"}, {"f": 'q"\\', "n": 3}, 1_500_000)


def test_floats_are_written_to_the_bit():
    values = [0.1, 1 / 3, 1e-300, 123456789.123456789, 2.0**60]
    for v in values:
        _, _, fields, _ = parse_line(_lines.line("m", {}, {"v": _lines.number(v, "v")}, 0))
        assert fields["v"] == v


def test_verdicts_are_written_as_records_and_as_series(fake):
    store = open_influx(fake)
    v = Verdict(
        T0, A, GpuState("at-risk"), risk=0.83, since=T0, changed_from=GpuState.OK,
        reasons=(Reason("SBE climbing", {"sbe_per_h": 4.0}),), threshold=0.7,
    )  # fmt: skip
    store.write_verdicts([v, Verdict(T0 + 60, A, GpuState("unhealthy"), cause="hard-signal")])
    series = {
        (m, f, dict(tags).get("state") or dict(tags).get("to") or ""): points
        for (m, tags, f), points in fake.snapshot("gpu").items()
        if m == "gpuwarden"
    }
    micros = int(T0 * 1e6) * 1000
    assert series[("gpuwarden", "risk_score", "")] == {micros: 0.83}  # unknown risk: no point
    assert series[("gpuwarden", "gpu_state", "at-risk")] == {micros: 1.0, micros + 60 * 10**9: 0.0}
    assert series[("gpuwarden", "gpu_state", "unhealthy")][micros + 60 * 10**9] == 1.0
    assert series[("gpuwarden", "gpu_transition", "at-risk")] == {micros: 1.0}
    got = store.read_verdicts()
    assert got["state"].tolist() == ["at-risk", "unhealthy"] and math.isnan(got["risk"].iloc[1])
    assert dict(got["reasons"].iloc[0][0].features) == {"sbe_per_h": 4.0}
    store.close()


# -- annotated CSV -------------------------------------------------------------------------

# Two shapes of table, a default value, an empty (null) cell, as InfluxDB's annotated CSV
# reference shows them.
DOC_CSV = (
    "#datatype,string,long,dateTime:RFC3339,dateTime:RFC3339,dateTime:RFC3339,double,string,string,string\r\n"
    "#group,false,false,true,true,false,false,true,true,true\r\n"
    "#default,_result,,,,,,,,\r\n"
    ",result,table,_start,_stop,_time,_value,_field,_measurement,host\r\n"
    ",,0,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2024-05-01T12:00:00.123456Z,1.5,temp,m,a\r\n"
    ",,1,2024-05-01T00:00:00Z,2024-05-02T00:00:00Z,2024-05-01T12:00:01Z,,temp,m,b\r\n"
    "\r\n"
    "#datatype,string,long,string,long,boolean\r\n"
    "#group,false,false,true,false,false\r\n"
    "#default,_result,,,7,\r\n"
    ",result,table,host,n,ok\r\n"
    ",,2,a,,true\r\n"
    ",,3,b,3,false\r\n"
    "\r\n"
)


def test_annotated_csv_reads_as_the_clients_own_parser_reads_it():
    import csv

    from influxdb_client.client.flux_csv_parser import FluxCsvParser, FluxSerializationMode

    ours = _flux.read_csv(csv.reader(DOC_CSV.splitlines()))
    response = SimpleNamespace(closed=True, data=DOC_CSV.encode(), close=lambda: None)
    parser = FluxCsvParser(response=response, serialization_mode=FluxSerializationMode.tables)
    list(parser.generator())
    records = [r.values for table in parser.table_list() for r in table.records]
    assert len(ours) == len(records) == 4
    for (_, row), rec in zip(ours.iterrows(), records, strict=True):
        for column, value in rec.items():
            if column in ("result", "table"):
                continue
            mine = row[column]
            if value is None:
                assert mine != mine or mine == "", column  # NaN (or "" for text)
            elif hasattr(value, "timestamp"):
                assert mine == value.timestamp(), column
            elif isinstance(value, bool):
                assert mine == float(value), column
            else:
                assert mine == value, column
    assert np.isnan(ours["_value"].iloc[1]) and ours["n"].tolist()[2:] == [7.0, 3.0]


def test_an_error_table_in_the_answer_is_a_store_error():
    import csv

    text = "#datatype,string,string\r\n#group,true,true\r\n#default,,\r\n,error,reference\r\n,panic: out of memory,897\r\n"
    with pytest.raises(StoreError, match="out of memory \\(reference 897\\)"):
        _flux.read_csv(csv.reader(text.splitlines()))


def test_flux_literals_are_escaped():
    assert _flux.string('a"b\\c${x}') == '"a\\"b\\\\c\\${x}"'
    assert (
        _flux.time(T0) == "2024-05-01T12:00:00Z"
        and _flux.time(T0 + 0.25) == "2024-05-01T12:00:00.250000Z"
    )


def test_the_model_scores_the_same_from_influxdb_as_from_sqlite(fake):
    """The shipped model over the same simulated history, read through Flux from the fake or
    from SQLite: the same states, the same risks (to 1e-9: server-side means)."""
    from gpuwarden.collectors.sim import SimCollector
    from gpuwarden.models._assess import assess
    from gpuwarden.store.sqlite import SqliteStore

    influx, sqlite = open_influx(fake), SqliteStore(":memory:")
    sim = SimCollector.from_url("sim://?nodes=2&gpus=2&seed=7&step=600&accel=50")
    for _ in range(144):  # a day
        batch = sim.collect()
        influx.write_batch(batch)
        sqlite.write_batch(batch)
    want = {a.gpu.uuid: a for a in assess(sqlite, batch.ts + 1)}
    got = {a.gpu.uuid: a for a in assess(influx, batch.ts + 1)}
    assert got.keys() == want.keys() and len(got) == 4
    for uuid, a in want.items():
        assert got[uuid].state == a.state and got[uuid].risk == pytest.approx(a.risk, abs=1e-9)
        assert got[uuid].reasons == a.reasons
    assert len({round(a.risk, 3) for a in want.values()}) > 1  # not all alike
    influx.close()
    sqlite.close()
