"""The words and patterns the claim checker reads: numbers, units, dates, names, and the words
that tie a number to a metric of the facts (``METRIC_WORDS``, keyed by ``_atoms`` metric)."""

from __future__ import annotations

import calendar
import re

from gpuwarden.health import GpuState

ABOUT = re.compile(r"(?:about|around|roughly|approximately|nearly|almost|some|~|≈)\s*$", re.I)
ABOVE = re.compile(r"(?:over|more than|above|at least|exceed(?:ing|ed)?|upwards of|>=?)\s*$", re.I)
BELOW = re.compile(r"(?:under|less than|below|fewer than|at most|up to|<=?)\s*$", re.I)

_M = "|".join(m.lower() for m in calendar.month_abbr[1:])
ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ]\d{2}:\d{2}(?::\d{2})?Z?)?\b")
DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_M})[a-z]*\.?(?:\s+(\d{{4}}))?\b", re.I)
MONTH_DAY = re.compile(
    rf"\b({_M})[a-z]*\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", re.I
)
TIME_OF_DAY = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s*UTC)?\b")
CITATION = re.compile(r"\[(?:R|F)\d+\]|^\s*(?:\d+[.)]|[-*•])\s+", re.M)
UUID = re.compile(r"\bGPU-[0-9a-fA-F]{4,}(?:-[0-9a-fA-F]+)*\b")
XID = re.compile(r"\bS?Xids?\s*(?:code\s*)?#?(\d+)\b", re.I)
IDENT = re.compile(r"(?<![\w.-])[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*(?![\w-])")
FLEET_WORDS = re.compile(r"\b(?:fleet|cluster|overall|in total|total|all GPUs|fleet-wide)\b", re.I)
#: Letter-and-digit words that are not names: units, percentiles, CO2, Xid spellings, sizes.
NOT_NAMES = re.compile(
    r"^(?:co2(?:e|-eq)?|p\d{1,3}|s?xid\d*|[kmgt]?wh|q[1-4]|h\d|mi?b|gi?b|ti?b|pcie\d*|gen\d|"
    r"nvlink\d*|ecc|dbe|sbe|utc[+-]?\d*|iso\d+|r\d+|f\d+|x\d+|ipv[46]|http\S*)$",
    re.I,
)
GPU_AFTER = re.compile(r"^(?:/|:|'s\s+GPU\s*#?|\s+GPU\s*#?|\s+gpu\s*#?)(\d+)\b")
GPU_BEFORE = re.compile(r"\bGPU\s*#?(\d+)\s+(?:on|of|in|at)\s+$", re.I)
UNIT = (
    r"(?P<unit>\s*(?:%|percent\b|per cent\b|percentage points?\b|pp\b|"
    r"GPU[- ]hours?\b|GPU[- ]h\b|g(?:\s*CO2)?\s*(?:per|/)\s*kWh\b|[kMG]?Wh\b|kg\b|tonnes?\b|t\b|g\b|"
    r"hours?\b|hrs?\b|h\b|minutes?\b|mins?\b|min\b|days?\b|d\b|weeks?\b|"
    r"USD\b|EUR\b|GBP\b|dollars?\b|euros?\b))?"
)
NUMBER = re.compile(
    r"(?<![\w.])(?P<cur>[$€£])?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?!(?:st|nd|rd|th)\b)"
    + UNIT,
    re.I,
)
WORD_NUMBERS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen".split()
    )
}
TENS = {
    w: 10 * (i + 2)
    for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())
}
WORD_NUMBER = re.compile(
    r"\b(?:(?P<tens>"
    + "|".join(TENS)
    + r")(?:[- ](?P<ones>"
    + "|".join(list(WORD_NUMBERS)[1:10])
    + r"))?"
    r"|(?P<small>" + "|".join(WORD_NUMBERS) + r")|(?P<dozen>a dozen|dozen))"
    r"(?P<hundred>\s+hundred)?\b(?!\s+of\b)(?!-)" + UNIT,
    re.I,
)
_UNIT_DIMS: list[tuple[str, str, float]] = [
    (r"%|percent|per cent|percentage points?|pp", "pct", 1.0),
    (r"gpu[- ]hours?|gpu[- ]h", "gpu_hours", 1.0),
    (r"g(?:\s*co2)?\s*(?:per|/)\s*kwh", "g_per_kwh", 1.0),
    (r"gwh", "kwh", 1e6), (r"mwh", "kwh", 1000.0), (r"kwh", "kwh", 1.0), (r"wh", "kwh", 1e-3),
    (r"kg", "kg", 1.0), (r"tonnes?|t", "kg", 1000.0), (r"g", "kg", 1e-3),
    (r"hours?|hrs?|h", "hours", 1.0), (r"minutes?|mins?|min", "hours", 1 / 60),
    (r"days?|d", "hours", 24.0), (r"weeks?", "hours", 168.0),
    (r"usd|eur|gbp|dollars?|euros?", "money", 1.0),
]  # fmt: skip

BAD = re.escape(str(GpuState.UNHEALTHY))
METRIC_WORDS: dict[str, str] = {
    "availability": r"availab|uptime|\bup\b",
    "downtime": r"downtime|\bdown\b|outage|unavailab|offline",
    "failures": r"fail|broke|died",
    "caught": r"caught|flag|predict|foresaw|warn|in advance|ahead",
    "missed": r"miss|no warning|unflagged|without warning",
    "unwatched": r"not watch|unwatched|no verdict|not running",
    "lookback": r"before|prior|ahead|no verdict|watch",
    "missed_near": r"near|close to",
    "lead_time": r"lead|before|ahead|advance|earlier|warn|notice",
    "risk_now": r"at[- ]risk", "bad_now": BAD, "flagged": r"flag|at[- ]risk|" + BAD,
    "at_risk_daily": r"at[- ]risk", "unhealthy_daily": BAD,
    "risk": r"risk|score", "xid_code": r"xid",
    "transitions": r"transition|alert|state change|changed state|decision",
    "to_at_risk": r"at[- ]risk", "to_unhealthy": BAD,
    "to_ok": r"\bok\b|recover|returned|cleared|back to",
    "hard_signal_transitions": r"hard[- ]signal",
    "retags": r"re-?tag|tagg|hook", "retags_ok": r"re-?tag|tagg|hook|succe",
    "retags_failed": r"re-?tag|hook|fail",
    "xids": r"xid|error|event|times|occurr|logged", "xid_codes": r"code|kind|type|distinct",
    "memory_errors": r"memory error|hbm|ecc|correct|\bce\b|\buer\b|\bueo\b|error",
    "memory_devices": r"\bdevices?\b|accelerators?|\bgpus?\b|\bboards?\b",
    "hard_signals": r"hard[- ]signal|fatal|lost|reset|double-bit|remap|signal",
    "util": r"utili[sz]|busy|\butil\b|\bload\b|active",
    "memory": r"memory|framebuffer|\bmem\b|\bvram\b", "idle": r"idle|unused",
    "energy": r"energy|kwh|mwh|gwh|consum|power|electric",
    "co2": r"co2|carbon|emission", "grid": r"grid|intensity|per kwh|/kwh",
    "gpu_hours": r"gpu[- ]h", "gpu_hours_measured": r"gpu[- ]h|measured|power",
    "capacity": r"capacity|available gpu[- ]h",
    "allocated": r"allocat|booked|reserved|used|busy|held|capacity",
    "jobs": r"\bjobs?\b|started", "jobs_waiting": r"waiting|queued|pending",
    "queue_wait_median": r"median|typical|p50|half of",
    "queue_wait_p95": r"p95|95th|percentile|tail|worst", "preemptions": r"preempt",
    "share": r"share|of (?:the|all)|percent of", "quota": r"quota", "quota_used": r"quota",
    "cost": r"cost|spen[dt]|bill|charge|\$|€|£|usd|eur", "price": r"price|rate|per gpu[- ]hour",
    "gpus": r"\bgpus?\b|\bboards?\b|\bcards?\b|\bdevices?\b",
    "nodes": r"\bnodes?\b|\bhosts?\b|\bservers?\b|\bmachines?\b",
    "added": r"added|new|joined", "replaced": r"replac|swap", "models": r"model|type|kind",
    "missing": r"missing|silent|stopped reporting|absent|gone",
    "period": r"week|period|hours|days|\bh\b",
    "forecast": r"forecast|expect|predict|demand|want", "forecast_peak": r"peak|busiest|forecast",
    "forecast_low": r"low|interval|between|range|forecast|from",
    "forecast_high": r"high|interval|between|range|forecast|\bto\b|up to",
    "need": r"need|requir|peak|plan", "growth": r"grow|growth|per month|monthly",
    "add": r"\badd|buy|order|purchase|more|extra|short", "release": r"releas|remov|retire|return|"
    r"spare|surplus|fewer|idle|give back", "in_weeks": r"weeks?|order|within",
    "break_even": r"break[- ]even|own|cheaper|cloud|on-demand|rent",
    "break_even_reserved": r"break[- ]even|reserved|cheaper|cloud",
    "buffer": r"buffer|headroom|x\s*\d", "plan_weeks": r"plan|weeks? ahead",
    "history": r"history|hours of|learn", "interval": r"interval|confidence|prediction",
    "sleep_nodes": r"sleep|slept|asleep|\bnodes?\b", "sleep_hours": r"sleep|slept|asleep|node-hour",
    "sleep_threshold": r"threshold|utili[sz]|idle", "sleep_saved": r"sav|sleep|slept",
    "sleep_saved_week": r"sav|a week|per week|weekly", "headroom": r"headroom|awake",
    "sleep_window": r"window", "wait_p50": r"median|p50|typical|wait",
    "wait_p90": r"p90|90th|percentile|wait",
    "spot_nodes": r"spot|\bnodes?\b", "spot_gpus": r"spot|\bgpus?\b",
    "spot_gpu_hours": r"spot|gpu[- ]h", "interruptible_gpu_hours": r"interruptib|gpu[- ]h",
    "spot_share": r"spot|share|interruptib|of (?:the|all|their)",
    "critical_on_spot": r"critical|non-interruptib|not interruptib",
    "reclaims": r"reclaim|interrupt|taken back|took back", "evicted": r"evict|requeu|re-queu|"
    r"checkpoint|\bjobs?\b", "lost": r"\blost\b|\blose|wasted|redo|thrown|discard",
    "spot_saved": r"sav|spot|cheaper", "spot_saved_pct": r"sav|spot|cheaper|less",
    "on_demand_price": r"on[- ]demand|price|rate|per gpu[- ]hour",
    "spot_price": r"spot|price|rate|per gpu[- ]hour",
    "on_demand_cost": r"on[- ]demand|would have cost", "spot_cost": r"spot|cost|paid|spen[dt]",
    "previous": r"previous|prior|week before|last week|from|compared|against|earlier",
    "change": r"chang|rose|fell|drop|increas|decreas|grew|\bup\b|\bdown\b|more|less|higher|lower|"
              r"compared|against|previous|last week|before",
}  # fmt: skip
#: The headline numbers ``facts.changes`` compares, by the metric their own value is read as. A
#: change's atoms (its value the period before, how much it moved) are that metric's alone: "fleet
#: availability rose by 6 points" is checked against availability's move, not against energy's
#: 6.4% that happened to fall in the same week.
CHANGE_METRICS: dict[str, str] = {
    "fleet availability": "availability", "fleet GPU utilisation": "util", "energy": "energy",
    "queue wait p95": "queue_wait_p95", "preemptions": "preemptions", "failures": "failures",
    "Xids": "xids", "verdict transitions": "transitions", "GPUs": "gpus",
    "GPUs at risk or unhealthy": "flagged", "GPU-hours allocated": "gpu_hours",
}  # fmt: skip
for _m in set(CHANGE_METRICS.values()):
    for _kind in ("change", "previous"):  # both the move's words and the metric's, anywhere
        METRIC_WORDS[f"{_kind}_{_m}"] = (
            rf"^(?=[\s\S]*(?:{METRIC_WORDS[_kind]}))(?=[\s\S]*(?:{METRIC_WORDS[_m]}))"
        )
