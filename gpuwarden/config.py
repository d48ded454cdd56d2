"""Settings, declared once.

Each setting has a default and a help line. Values come from, in rising order of precedence:
the defaults below, a TOML file (``--config FILE``, ``$GPUWARDEN_CONFIG``, or
``/etc/gpuwarden/gpuwarden.toml`` when it exists), then ``GPUWARDEN_<NAME>`` environment
variables (``GPUWARDEN_STORE=sqlite:///data/gpu.db``). Command-line options override all three.
Secrets (tokens, webhook URLs) are read from the environment only, never from the TOML file.
``parse_listen`` and ``parse_duration`` read the values settings, options and URLs take;
``redact_url`` masks the passwords a URL may carry wherever one is shown.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwarden.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str

    @property
    def env(self) -> str:
        return "GPUWARDEN_" + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "store", "sqlite:///gpuwarden.db", "Where telemetry is kept (a store URL or a SQLite path)."
    ),
    Setting(
        "collector",
        "nvml://",
        "Where telemetry comes from (nvml://, smi://, dcgm+http://HOST:9400/metrics, sim://).",
    ),
    Setting("interval_s", 15.0, "Seconds between two collections."),
    Setting("listen", "127.0.0.1:9400", "Address the exporter serves /metrics on (HOST:PORT)."),
    Setting(
        "hostname", "", "Hostname to report for this node's GPUs (empty: the machine's hostname)."
    ),
    Setting("smi_timeout_s", 10.0, "Seconds before a hung nvidia-smi is killed."),
    Setting("dcgm_timeout_s", 5.0, "Seconds before a dcgm-exporter scrape is abandoned."),
    Setting("retention_raw_days", 14.0, "Days of raw samples kept before only rollups remain."),
    Setting("retention_rollup_days", 400.0, "Days of downsampled rollups kept."),
    Setting(
        "compact_every_s", 3600.0, "Seconds between two roll-up / retention passes of `collect`."
    ),
    Setting(
        "grid_intensity_g_per_kwh",
        "",
        "Carbon intensity of the grid the GPUs draw from, gCO2e per kWh (empty: unknown); "
        "billing and the weekly report show CO2 when set.",
    ),
    Setting(
        "hook_allow",
        "public,private",
        "Where a job's checkpoint hook URL may reach, from the node agent: public, private, "
        "loopback, link-local and networks (10.0.0.0/8); cloud metadata never. docs/security.md.",
    ),
    Setting(
        "numpy_huge_pages",
        "auto",
        "numpy's huge-page advice: auto (off where the kernel's THP defrag stalls on it), on or "
        "off. $NUMPY_MADVISE_HUGEPAGE wins. docs/scale.md#tuning.",
    ),
    Setting(
        "arrow_memory_pool",
        "auto",
        "pyarrow's memory pool (pandas' string columns): auto (the C library's allocator where "
        "the kernel's THP defrag stalls on huge-page advice), system, mimalloc or jemalloc. "
        "$ARROW_DEFAULT_MEMORY_POOL wins. docs/scale.md#tuning.",
    ),
    Setting(
        "score_threads",
        1,
        "OpenMP threads while scoring (0: OpenMP's default, every core); $OMP_NUM_THREADS wins. "
        "docs/scale.md#tuning.",
    ),
    Setting(
        "link_rules",
        "on",
        "The link rules beside the model: on, off, or name=value pairs (nvlink=off,pcie_hours=4). "
        "docs/models.md#rules-beside-the-model.",
    ),
    Setting(
        "at_risk_threshold",
        "",
        "Risk (0-1] at which a GPU turns at-risk, over the model card's (empty: the card's, "
        "0.50 for the shipped model). docs/models.md#choosing-the-at-risk-line.",
    ),
    Setting(
        "xid_severity",
        "",
        "TOML file of Xid severities (class, fatal, action per code) over the shipped table.",
    ),
    # the weekly report (docs/report.md); the LLM's key only from $GPUWARDEN_LLM_API_KEY
    Setting(
        "llm_base_url",
        "",
        "OpenAI-compatible API of the report's LLM (empty: OpenAI's, if a key is set).",
    ),
    Setting(
        "llm_model", "", "Model the report's LLM runs (deepseek-chat, gpt-4o-mini, llama3.1, ...)."
    ),
    Setting("llm_timeout_s", 60.0, "Seconds one LLM request may take before it is retried."),
    Setting("llm_retries", 2, "Retries of an LLM request after a timeout, 429 or 5xx."),
    Setting("report_dir", "gpuwarden-reports", "Folder the weekly reports are written to."),
    Setting(
        "report_slack_channel", "", "Slack channel id the report files are uploaded to (bot token)."
    ),
    Setting("slack_api_url", "https://slack.com/api/", "Slack Web API base URL (report uploads)."),
    Setting(
        "scheduler_db", "", "The bundled scheduler's SQLite file, for queue, tenant and cost facts."
    ),
    Setting("audit_db", "gpuwarden-audit.db", "The audit log the report counts re-tags from."),
    Setting(
        "gpu_hour_price", 0.0, "Price of one GPU-hour for the report's cost by tenant (0: no cost)."
    ),
    Setting("currency", "USD", "Currency of gpu_hour_price."),
    Setting("capacity_buffer", 1.3, "The report's capacity plan: GPUs needed = forecast x buffer."),
    Setting(
        "tco_prices", "", "TCO price file (TOML) for the report's break-even (empty: shipped)."
    ),
)

SETTINGS_BY_NAME: Mapping[str, Setting] = {s.name: s for s in SETTINGS}
DEFAULT_CONFIG_PATH = Path("/etc/gpuwarden/gpuwarden.toml")


def _coerce(setting: Setting, value: Any, source: str) -> Any:
    kind = type(setting.default)
    if isinstance(value, kind):
        return value
    try:
        if kind is float:
            return float(value)
        if kind is int:
            return int(value)
        if kind is str:
            return str(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"{source}: {setting.name} must be a {kind.__name__}, got {value!r}"
        ) from exc
    return value


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Defaults, then the TOML file, then ``GPUWARDEN_*`` variables."""
    environ = os.environ if environ is None else environ
    values = {s.name: s.default for s in SETTINGS}
    file = path or environ.get("GPUWARDEN_CONFIG") or None
    if file is None and DEFAULT_CONFIG_PATH.exists():
        file = DEFAULT_CONFIG_PATH
    if file is not None:
        try:
            data = tomllib.loads(Path(file).read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {file} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc
        section = data.get("gpuwarden", data)
        for key, value in section.items():
            if key not in SETTINGS_BY_NAME:
                known = ", ".join(SETTINGS_BY_NAME)
                raise ConfigError(f"{file}: unknown setting {key!r} (known: {known})")
            values[key] = _coerce(SETTINGS_BY_NAME[key], value, str(file))
    for setting in SETTINGS:
        if setting.env in environ:
            values[setting.name] = _coerce(setting, environ[setting.env], setting.env)
    return values


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:9400"`` -> ``("127.0.0.1", 9400)``; ``":9400"`` binds every address."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"listen address {listen!r} must look like HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


#: Query parameters whose value is a secret (an InfluxDB token, a password).
_SECRET_PARAMS = re.compile(r"(?i)([?&](?:token|password|passwd|secret|api_key)=)[^&#]*")


def redact_url(url: str) -> str:
    """``url`` with the password of each ``user:password@`` and the value of each ``token=``
    or ``password=`` parameter shown as ``***``, for logs, ``/metrics`` and ``gpuwarden
    config``. A comma-separated list of endpoints (``dcgm+http://a,user:pw@b``) is masked
    endpoint by endpoint; anything else is returned as given."""
    parts = []
    for part in _SECRET_PARAMS.sub(r"\1***", url).split(","):
        scheme, sep, rest = part.partition("://")
        if not sep:
            scheme, rest = "", part
        authority_end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
        userinfo, at, host = rest[:authority_end].rpartition("@")
        if at and ":" in userinfo:
            user = userinfo.partition(":")[0]
            rest = f"{user}:***@{host}{rest[authority_end:]}"
        parts.append(f"{scheme}{sep}{rest}")
    return ",".join(parts)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smhd]?)\s*$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, name: str) -> float:
    """``"14d"``, ``"36h"``, ``"90m"``, ``"600s"`` or plain seconds -> seconds; ``name`` (the
    option or URL parameter) names the value in the ``ConfigError``."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{name}={text!r} is not a duration such as 14d, 36h, 90m or 600")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def grid_intensity(conf: Mapping[str, Any]) -> float | None:
    """The ``grid_intensity_g_per_kwh`` setting as a number, or None when it is not set (CO2
    unknown, never 0 g)."""
    value = conf["grid_intensity_g_per_kwh"]
    if value in (None, ""):
        return None
    try:
        grid = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"grid_intensity_g_per_kwh must be a number, got {value!r}") from None
    if not grid >= 0:
        raise ConfigError(f"grid_intensity_g_per_kwh must be >= 0, got {value!r}")
    return grid
