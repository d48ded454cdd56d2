"""``influxql://`` URLs: checked in one line, credentials never shown, the token as InfluxDB
1.8 takes it. (Reads against a real InfluxDB 1.x: tests/integration/test_influxql_ingest.py.)"""

from __future__ import annotations

import httpx
import pytest

from gpuwarden.errors import ConfigError, StoreError
from gpuwarden.store.influxql import InfluxQLSource


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("influxql://influx:8086", "say which database with \\?db=NAME"),
        ("influxql://influx:8086?db=t&bucket=x", "unknown parameter 'bucket'"),
        ("influxdb://influx:8086?db=t", "the scheme must be one of influxql, influxql\\+https"),
        ("influxql://influx:8086?db=t&timeout=0", "timeout must be a positive number"),
    ],
)
def test_a_bad_url_is_one_line(url, message):
    with pytest.raises(ConfigError, match=message):
        InfluxQLSource(url)


def test_credentials_are_masked_and_the_token_sent_as_influxdb_takes_it(monkeypatch):
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"results": [{"statement_id": 0, "error": "boom"}]})

    client = httpx.Client(transport=httpx.MockTransport(answer))
    source = InfluxQLSource("influxql://ops:s3cret@influx:8086?db=t", client=client)
    with pytest.raises(StoreError) as caught:
        source.measurements()
    assert "s3cret" not in str(caught.value) and "ops:***@influx" in str(caught.value)
    assert "boom" in str(caught.value)
    monkeypatch.setenv("GPUWARDEN_INFLUX_TOKEN", "ops:tok")
    token = InfluxQLSource("influxql://influx:8086?db=t&rp=week")
    assert token._http._client.headers["Authorization"] == "Token ops:tok"
    assert token._from("nvidia_smi") == '"week"."nvidia_smi"'
    assert token._from("/^DCGM_FI_/") == '"week"./^DCGM_FI_/'
    token.close()
