"""Total cost of ownership per GPU-hour used: own, rent bare metal, or buy cloud hours.

Cost per *used* GPU-hour at a yearly utilisation ``u`` (share of the year the GPU does work):

- own: ``(purchase / depreciation_years + purchase x maintenance_share + space + staff
  + energy(u)) / (8760 u)``; energy is ``(idle_w + (busy_w - idle_w) u) x 8760 h x PUE x price``;
  PUE carries the cooling;
- bare metal and cloud reserved: the hourly rate is paid every hour of the term, used or not:
  ``rate / u``;
- cloud on-demand and spot: paid only for hours used: ``rate`` (spot: ``rate x spot_overhead``,
  the work redone after reclaims).

Break-even utilisation is where owning costs the same as on-demand (``break_even``); the
suggested split (``split``) owns GPU number ``n`` when demand keeps it busy at least that share
of the hours, and leaves the rest to cloud.
"""

from __future__ import annotations

import datetime as dt
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from gpuwarden.errors import InputError
from gpuwarden.planning._toml import read_toml
from gpuwarden.wording import plural

HOURS_PER_YEAR = 8760.0
OWN_FIELDS = (
    "purchase_usd",
    "depreciation_years",
    "maintenance_share_per_year",
    "power_busy_w",
    "power_idle_w",
    "pue",
    "electricity_usd_per_kwh",
    "space_usd_per_gpu_month",
    "staff_usd_per_gpu_year",
)
RATE_FIELDS = {"bare_metal": ("usd_per_gpu_hour",), "cloud": ("on_demand", "reserved", "spot")}
OPTIONS = ("own", "bare_metal", "cloud_reserved", "cloud_on_demand", "cloud_spot")
#: Yearly utilisations the tables show; the guideline's figures are about the first (cloud is
#: cheaper below it) and the third (owning is 40-60% cheaper above it).
TABLE_UTILISATION = (0.3, 0.5, 0.7, 0.9)
GUIDE_LOW, GUIDE_HIGH = TABLE_UTILISATION[0], TABLE_UTILISATION[2]


@dataclass(frozen=True)
class Price:
    """One figure of the price file with where it came from: ``source`` a URL, or
    ``estimate: <basis>``; ``as_of`` the date it was read."""

    value: float
    source: str = ""
    as_of: dt.date | None = None


@dataclass(frozen=True)
class GpuPrices:
    """Every price of one GPU model (per GPU; hourly rates in USD per GPU-hour)."""

    gpu_model: str
    own: dict[str, Price]
    bare_metal: Price
    on_demand: Price
    reserved: Price
    spot: Price
    spot_overhead: float = 1.0
    notes: dict[str, str] = field(default_factory=dict)

    def own_yearly(self, utilisation: float) -> float:
        """Yearly cost of one owned GPU busy ``utilisation`` of the hours."""
        o = {k: p.value for k, p in self.own.items()}
        power_kw = (o["power_idle_w"] + (o["power_busy_w"] - o["power_idle_w"]) * utilisation) / 1e3
        energy = power_kw * HOURS_PER_YEAR * o["pue"] * o["electricity_usd_per_kwh"]
        return self.own_fixed_yearly() + energy

    def own_fixed_yearly(self) -> float:
        """Yearly cost of one owned GPU before energy: depreciation, maintenance, space, staff."""
        o = {k: p.value for k, p in self.own.items()}
        return (
            o["purchase_usd"] / o["depreciation_years"]
            + o["purchase_usd"] * o["maintenance_share_per_year"]
            + 12 * o["space_usd_per_gpu_month"]
            + o["staff_usd_per_gpu_year"]
        )

    def per_used_hour(self, option: str, utilisation: float) -> float:
        """USD per GPU-hour of work under ``option`` (one of ``OPTIONS``)."""
        if not 0 < utilisation <= 1:
            raise InputError(f"utilisation must be in (0, 1], got {utilisation}")
        if option == "own":
            return self.own_yearly(utilisation) / (HOURS_PER_YEAR * utilisation)
        if option == "bare_metal":
            return self.bare_metal.value / utilisation
        if option == "cloud_reserved":
            return self.reserved.value / utilisation
        if option == "cloud_on_demand":
            return self.on_demand.value
        if option == "cloud_spot":
            return self.spot.value * self.spot_overhead
        raise InputError(f"unknown option {option!r}; choose from {', '.join(OPTIONS)}")

    def own_against_on_demand(self, utilisation: float) -> str:
        """ "44% cheaper" or "5% dearer": owning against on-demand per used hour."""
        gap = 1 - self.per_used_hour("own", utilisation) / self.on_demand.value
        return f"{abs(gap):.0%} {'cheaper' if gap >= 0 else 'dearer'}"

    def break_even(self, option: str = "own", against: str = "cloud_on_demand") -> float | None:
        """Utilisation above which ``option`` (paid by the hour of the year) is cheaper per used
        hour than ``against`` (paid per hour used); None if it never is within (0, 1].

        Own: ``F + 8760 k (idle + (busy - idle) u) = 8760 r u`` with ``k = PUE x price / 1000``
        is linear in ``u``; a rented option: ``rate / u = r``."""
        r = self.per_used_hour(against, 1.0)
        if option == "own":
            o = {k: p.value for k, p in self.own.items()}
            k = o["pue"] * o["electricity_usd_per_kwh"] / 1e3
            fixed = self.own_fixed_yearly() + HOURS_PER_YEAR * k * o["power_idle_w"]
            slope = HOURS_PER_YEAR * (r - k * (o["power_busy_w"] - o["power_idle_w"]))
            u = fixed / slope if slope > 0 else math.inf
        else:
            u = self.per_used_hour(option, 1.0) / r
        return u if 0 < u <= 1 else None


def _price(value: Any, where: str, as_of: dt.date | None) -> Price:
    if isinstance(value, dict):
        extra = set(value) - {"value", "source", "as_of"}
        if extra:
            raise InputError(
                f"{where}: unknown {plural(len(extra), 'key')} {', '.join(sorted(extra))}"
            )
        if "value" not in value:
            raise InputError(f"{where}: a sourced price needs 'value'")
        source = value.get("source", "")
        if not isinstance(source, str):
            raise InputError(f"{where}: source must be a string (a URL, or 'estimate: ...')")
        date = value.get("as_of", as_of)
        if date is not None and not isinstance(date, dt.date):
            raise InputError(f"{where}: as_of must be a date like 2026-03-01, got {date!r}")
        return Price(_number(value["value"], where), source, date)
    return Price(_number(value, where), "", as_of)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: must be a number, got {value!r}")
    if value < 0:
        raise InputError(f"{where}: must be >= 0, got {value}")
    return float(value)


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    table = data.get(key)
    if not isinstance(table, dict):
        raise InputError(f"{where}: missing table [{where.split(': ')[-1]}.{key}]")
    return table


def parse_prices(data: dict[str, Any], source: str = "prices") -> dict[str, GpuPrices]:
    """Price tables per GPU model from a parsed TOML document (see ``prices.toml``)."""
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(f"{source}: [meta] must be a table")
    as_of = meta.get("as_of")
    if as_of is not None and not isinstance(as_of, dt.date):
        raise InputError(f"{source}: meta.as_of must be a date like 2026-03-01")
    if meta.get("currency", "USD") != "USD":
        raise InputError(f"{source}: only USD prices are supported, got {meta.get('currency')!r}")
    out = {}
    for model, table in data.items():
        if model == "meta":
            continue
        where = f"{source}: {model}"
        if not isinstance(table, dict):
            raise InputError(f"{where}: must be a table of own, bare_metal and cloud prices")
        extra = set(table) - {"own", "bare_metal", "cloud", "spot_overhead"}
        if extra:
            raise InputError(
                f"{where}: unknown {plural(len(extra), 'key')} {', '.join(sorted(extra))}"
            )
        own_t = _table(table, "own", where)
        missing = [f for f in OWN_FIELDS if f not in own_t]
        if missing:
            raise InputError(f"{where}.own: missing {', '.join(missing)}")
        unknown = set(own_t) - set(OWN_FIELDS)
        if unknown:
            raise InputError(
                f"{where}.own: unknown {plural(len(unknown), 'key')} {', '.join(sorted(unknown))}"
            )
        own = {f: _price(own_t[f], f"{where}.own.{f}", as_of) for f in OWN_FIELDS}
        if own["depreciation_years"].value <= 0:
            raise InputError(f"{where}.own.depreciation_years: must be > 0")
        if own["pue"].value < 1:
            raise InputError(f"{where}.own.pue: must be >= 1 (1.0 is no overhead at all)")
        if own["power_idle_w"].value > own["power_busy_w"].value:
            raise InputError(f"{where}.own: power_idle_w is above power_busy_w")
        rates = {}
        for section, names in RATE_FIELDS.items():
            t = _table(table, section, where)
            for name in names:
                if name not in t:
                    raise InputError(f"{where}.{section}: missing {name}")
                rates[name] = _price(t[name], f"{where}.{section}.{name}", as_of)
                if rates[name].value <= 0:
                    raise InputError(f"{where}.{section}.{name}: must be > 0")
        overhead = _number(table.get("spot_overhead", 1.0), f"{where}.spot_overhead")
        if overhead < 1:
            raise InputError(f"{where}.spot_overhead: must be >= 1 (work redone after reclaims)")
        out[model] = GpuPrices(
            model, own, rates["usd_per_gpu_hour"], rates["on_demand"], rates["reserved"],
            rates["spot"], overhead,
        )  # fmt: skip
    if not out:
        raise InputError(f"{source}: no GPU model priced")
    return out


def load_prices(path: str | Path | None = None) -> dict[str, GpuPrices]:
    """The price file the user edits, or the shipped defaults (``prices.toml``)."""
    if path is None:
        text = resources.files("gpuwarden.planning").joinpath("prices.toml").read_text("utf-8")
        return parse_prices(tomllib.loads(text), "default prices")
    return parse_prices(read_toml(path), str(path))


@dataclass(frozen=True)
class Split:
    """Base load to own (or rent long-term) and the elastic rest for cloud, in GPUs."""

    base_gpus: int
    peak_gpus: int
    elastic_gpus: int
    base_share_of_hours: float
    break_even: float | None


def split(demand: np.ndarray, prices: GpuPrices, peak_quantile: float = 0.99) -> Split:
    """The guideline's split from hourly demand: GPU number ``n`` is busy in the hours demand
    reaches ``n``, so owning it pays when that share is at least the break-even utilisation;
    base = the ``1 - break_even`` quantile of demand. Peak = the ``peak_quantile`` quantile."""
    values = np.asarray(demand, dtype=float)
    values = values[~np.isnan(values)]
    if values.size == 0:
        raise InputError("no demand to split")
    u = prices.break_even()
    peak = math.ceil(float(np.quantile(values, peak_quantile)))
    base = 0 if u is None else math.floor(float(np.quantile(values, 1 - u)))
    covered = float(np.mean(np.minimum(values, base)) / np.mean(values)) if values.mean() else 0.0
    return Split(base, peak, max(0, peak - base), covered, u)


def chart(prices: GpuPrices, path: str | Path) -> Path:
    """PNG of cost per used GPU-hour against yearly utilisation, one line per option."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    u = np.linspace(0.05, 1.0, 96)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for option in OPTIONS:
        ax.plot(
            u * 100, [prices.per_used_hour(option, x) for x in u], label=option.replace("_", " ")
        )
    be = prices.break_even()
    if be is not None:
        ax.axvline(be * 100, color="grey", linestyle=":", label=f"break-even own {be:.0%}")
    top = 3 * prices.on_demand.value
    ax.set_ylim(0, top)
    ax.set_xlabel("yearly utilisation (%)")
    ax.set_ylabel("USD per used GPU-hour")
    ax.set_title(f"{prices.gpu_model}: cost per GPU-hour of work")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
