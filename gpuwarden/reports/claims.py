"""The claim checker: every number, percentage, date, hostname and GPU id in a text, against the
facts.

A claim binds an entity, a metric and a value. In each sentence:

- the **entity** of a number is the nearest one named before it (a host, a GPU as ``node3 GPU 2``,
  ``node3/2``, ``GPU 2 on node3`` or its UUID, a GPU model, a tenant, an Xid code, or the fleet:
  "fleet", "cluster", "overall", "total"); with none before it, the fleet or the next one named.
  A GPU's claims may be its own facts or its host's.
- the **metric** is read from the words of the number's clause ("availability", "downtime",
  "Xid", "kWh", "queue", ...); a clause with no such word may match any fact of the entity.
- the **value** must equal a fact of that entity and metric, within the written precision:
  ``93.8%`` stands for 93.75..93.85, ``94%`` for 93.5..94.5, ``1.2 MWh`` for 1150..1250 kWh.
  Units convert (%, and a 0..1 risk score as %; minutes, hours, days, weeks; Wh, kWh, MWh,
  GWh; g, kg, t of CO2). "about", "around", "roughly", "nearly", "~" widen it to 5 %; "over",
  "more than", "at least" (and "under", "less than", "at most") check one side.
- numbers in words count ("three failures", "twenty-one GPUs", "a dozen").
- every date must be one the facts hold for that entity or the period; every name that looks
  like an identifier (letters and digits: ``node017``, ``gpu-a7``, ``H200``) must be a host, GPU
  model, tenant or known code of the facts; a GPU index must exist on its host.

``check(text, ix)`` returns the failing sentences with their errors.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

from gpuwarden.reports._atoms import FLEET, Atom, Index, gpu_entity
from gpuwarden.reports._vocab import (
    _UNIT_DIMS,
    ABOUT,
    ABOVE,
    BELOW,
    CITATION,
    DAY_MONTH,
    FLEET_WORDS,
    GPU_AFTER,
    GPU_BEFORE,
    IDENT,
    ISO_DATE,
    METRIC_WORDS,
    MONTH_DAY,
    NOT_NAMES,
    NUMBER,
    TENS,
    TIME_OF_DAY,
    UUID,
    WORD_NUMBER,
    WORD_NUMBERS,
    XID,
)


@dataclass(frozen=True)
class ClaimError:
    sentence: str
    claim: str
    why: str


@dataclass(frozen=True)
class _Claim:
    start: int
    text: str
    value: float
    dim: str | None  # None: no unit written
    tol: float
    side: str  # "=", ">=", "<="


def sentences(text: str) -> list[str]:
    """Sentences and list items, in order, as written (markup and all)."""
    out: list[str] = []
    for line in text.splitlines():
        for part in re.split(r"(?<=[.!?])\s+(?=\S)", line):
            if part.strip():
                out.append(part.strip())
    return out


def check(text: str, ix: Index) -> dict[str, list[ClaimError]]:
    """The sentences of ``text`` with at least one unsupported claim, with their errors."""
    found: dict[str, list[ClaimError]] = {}
    for s in sentences(text):
        errors = check_sentence(s, ix)
        if errors:
            found[s] = errors
    return found


def check_sentence(sentence: str, ix: Index) -> list[ClaimError]:
    errors: list[str] = []
    masked = list(sentence)
    mentions: list[tuple[int, str]] = []

    def mask(a: int, b: int) -> None:
        masked[a:b] = " " * (b - a)

    def text() -> str:
        return "".join(masked)

    for m in CITATION.finditer(sentence):
        mask(m.start(), m.end())
    for m in TIME_OF_DAY.finditer(text()):
        mask(m.start(), m.end())
    for m in UUID.finditer(text()):
        entity = ix.uuids.get(m.group())
        if entity is None:
            errors.append(f"{m.group()}: no GPU with this UUID in the facts")
        else:
            mentions.append((m.start(), entity))
        mask(m.start(), m.end())
    for m in XID.finditer(text()):
        code = int(m.group(1))
        if m.group().lower().startswith("xid") and code not in ix.xids:
            errors.append(f"{m.group()}: no Xid {code} in the facts or NVIDIA's catalogue")
        mentions.append((m.start(), f"xid:{code}"))
        mask(m.start(), m.end())
    for tenant in sorted(ix.tenants, key=len, reverse=True):
        for m in re.finditer(rf"(?<![\w-]){re.escape(tenant)}(?![\w-])", text()):
            mentions.append((m.start(), f"tenant:{tenant}"))
            mask(m.start(), m.end())
    for model in sorted(ix.models, key=len, reverse=True):
        for m in re.finditer(rf"(?<![\w-]){re.escape(model)}(?![\w-])", text()):
            mentions.append((m.start(), f"model:{model}"))
            mask(m.start(), m.end())
    _names(sentence, text(), ix, mentions, errors, mask)
    for m in FLEET_WORDS.finditer(text()):
        mentions.append((m.start(), FLEET))
    mentions.sort()
    lowered = sentence.lower()
    for claim, dates in _dates(text(), ix, mask):
        entity_dates = set(ix.period_dates)
        for e in _bound(mentions, claim.start):
            entity_dates |= ix.dates.get(e, set()) | ix.dates.get(_host_of(e), set())
        if not dates & entity_dates:
            errors.append(f"{claim.text}: no such date in the facts for what the sentence names")
    for claim in _numbers(text()):
        clause = _clause(lowered, claim.start)
        visible = _visible(mentions, sentence, claim.start)
        bound = _bound(visible, claim.start, claim.start + len(claim.text))
        why = _unsupported(claim, bound, clause, ix)
        if why:
            errors.append(f"{claim.text.strip()}: {why}")
    return [ClaimError(sentence, e.split(":", 1)[0], e) for e in errors]


def _names(sentence: str, text: str, ix: Index, mentions: list, errors: list, mask) -> None:
    """Hosts, GPUs of hosts, GPU model spellings; unknown identifiers are errors."""
    for m in IDENT.finditer(text):
        word = m.group()
        if not (re.search(r"\d", word) or word in ix.hosts):
            continue
        if word in ix.hosts:
            after = GPU_AFTER.match(text[m.end() :])
            before = GPU_BEFORE.search(text[: m.start()])
            if after or before:
                idx = int((after or before).group(1))  # type: ignore[union-attr]
                if (word, idx) not in ix.slots:
                    errors.append(f"{word} GPU {idx}: no such GPU in the facts")
                mentions.append((before.start() if before else m.start(), gpu_entity(word, idx)))
                mask(
                    before.start() if before else m.start(), m.end() + (after.end() if after else 0)
                )
            else:
                mentions.append((m.start(), f"host:{word}"))
                mask(m.start(), m.end())
        elif NOT_NAMES.match(word):
            continue
        elif any(model.startswith(word) or word in model for model in ix.models):
            family = [model for model in ix.models if model.startswith(word) or word in model]
            mentions.append((m.start(), f"model:{family[0]}" if len(family) == 1 else FLEET))
            mask(m.start(), m.end())
        else:
            errors.append(f"{word}: not a host, GPU model or tenant of the facts")
            after = GPU_AFTER.match(text[m.end() :])
            mask(m.start(), m.end() + (after.end() if after else 0))


def _host_of(entity: str) -> str:
    return f"host:{entity[4:].rsplit('/', 1)[0]}" if entity.startswith("gpu:") else entity


def _visible(mentions: list[tuple[int, str]], sentence: str, pos: int) -> list[tuple[int, str]]:
    """The mentions a claim at ``pos`` can see: one inside parentheses ("gpu7 GPU 1
    (A100-80GB) is at risk with 0.77") binds only the claims inside the same parentheses."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"\([^()]*\)", sentence)]
    here = next(((a, b) for a, b in spans if a <= pos < b), None)
    return [(p, e) for p, e in mentions
            if not any(a <= p < b for a, b in spans) or (here and here[0] <= p < here[1])]  # fmt: skip


def _bound(mentions: list[tuple[int, str]], pos: int, end: int | None = None) -> list[str]:
    """The entities a claim at ``pos`` may be about: the one named right after it ("7 H100"),
    else the nearest named before it, else the fleet or the next one named."""
    after = [e for p, e in mentions if p > pos]
    right_after = [e for p, e in mentions if end is not None and 0 <= p - end <= 1]
    if right_after:
        return right_after[:1]
    before = [e for p, e in mentions if p < pos]
    if before:
        return [before[-1]]
    return [FLEET, *after[:1]]


#: A comma ends a clause, but not the thousands separator of a number ("3,657.8 kWh").
_COMMA = r"(?:,(?<!\d,)|,(?!\d{3}(?!\d)))"


def _clause(lowered: str, pos: int) -> str:
    cuts = [
        0,
        *[
            m.end()
            for m in re.finditer(_COMMA + r"|[;:()]|\b(?:and|while|but|whereas|with)\b", lowered)
        ],
    ]
    start = max(c for c in cuts if c <= pos)
    ends = [
        m.start()
        for m in re.finditer(_COMMA + r"|[;:()]|\b(?:and|while|but|whereas)\b", lowered)
        if m.start() > pos
    ]
    return lowered[start : (ends[0] if ends else len(lowered))]


def _dates(text: str, ix: Index, mask) -> list[tuple[_Claim, set[str]]]:
    out = []
    for m in ISO_DATE.finditer(text):
        out.append((_Claim(m.start(), m.group(), 0, None, 0, "="), {m.group()[:10]}))
        mask(m.start(), m.end())
    for pattern, day_group, month_group in ((DAY_MONTH, 1, 2), (MONTH_DAY, 2, 1)):
        for m in pattern.finditer("".join(text)):
            month = [a.lower() for a in calendar.month_abbr].index(m.group(month_group)[:3].lower())
            year = (
                int(m.group(3)) if m.group(3) else (ix.year if month <= ix.month else ix.year - 1)
            )
            out.append(
                (
                    _Claim(m.start(), m.group(), 0, None, 0, "="),
                    {f"{year:04d}-{month:02d}-{int(m.group(day_group)):02d}"},
                )
            )
            mask(m.start(), m.end())
    return out


def _numbers(text: str) -> list[_Claim]:
    claims = []
    for m in NUMBER.finditer(text):
        raw = m.group("num").replace(",", "")
        decimals = len(raw.split(".")[1]) if "." in raw else 0
        value = float(raw)
        unit = (m.group("unit") or "").strip().lower()
        dim, scale = None, 1.0
        if m.group("cur"):
            dim = "money"
        elif unit:
            for pattern, d, s in _UNIT_DIMS:
                if re.fullmatch(pattern, unit):
                    dim, scale = d, s
                    break
        tol = 0.5 * 10.0**-decimals * scale
        claims.append(
            _Claim(m.start(), m.group(), value * scale, dim, tol, _side(text[: m.start()]))
        )
    for m in WORD_NUMBER.finditer(text):
        if m.group("dozen"):
            value = 12.0
        elif m.group("tens"):
            value = TENS[m.group("tens").lower()] + (
                WORD_NUMBERS[m.group("ones").lower()] if m.group("ones") else 0
            )
        else:
            value = float(WORD_NUMBERS[m.group("small").lower()])
        if m.group("hundred"):
            value *= 100
        if value == 1 and not m.group("hundred") and not m.group("unit"):
            continue  # "one" is more often a pronoun ("the one that failed") than a count
        dim, scale = _unit(m)
        claims.append(
            _Claim(m.start(), m.group(), value * scale, dim, 0.0, _side(text[: m.start()]))
        )
    return claims


def _unit(m: re.Match[str]) -> tuple[str | None, float]:
    """The dimension and scale of a number's written unit (None: no unit)."""
    unit = (m.group("unit") or "").strip().lower()
    for pattern, dim, scale in _UNIT_DIMS:
        if unit and re.fullmatch(pattern, unit):
            return dim, scale
    return None, 1.0


def _side(before: str) -> str:
    if ABOUT.search(before):
        return "~"
    if ABOVE.search(before):
        return ">="
    if BELOW.search(before):
        return "<="
    return "="


def _unsupported(claim: _Claim, entities: list[str], clause: str, ix: Index) -> str | None:
    """None if a fact of a bound entity supports the claim, else why not."""
    pool: list[Atom] = list(ix.atoms.get(FLEET, [])) if FLEET in entities else []
    for e in entities:
        if e != FLEET:
            pool += ix.atoms.get(e, []) + (
                ix.atoms.get(_host_of(e), []) if e.startswith("gpu:") else []
            )
    pool += [a for a in ix.atoms.get(FLEET, []) if a.metric == "period"]
    named = [a for a in pool if re.search(METRIC_WORDS.get(a.metric, r"(?!)"), clause)]
    if named:
        pool = named
    for atom in pool:
        for value in _as(atom, claim.dim):
            if _matches(claim, value):
                return None
    about = entities[0].replace("host:", "").replace("gpu:", "GPU ").replace("model:", "")
    shown = sorted({_show(a) for a in pool if claim.dim is None or claim.dim in _dims(a)})[:6]
    return f"no fact of {about} supports it" + (
        f" (the facts say: {', '.join(shown)})" if shown else ""
    )


def _dims(atom: Atom) -> set[str]:
    return {"pct", "ratio"} if atom.dim == "ratio" else {atom.dim}


def _as(atom: Atom, dim: str | None) -> list[float]:
    if dim is None:
        return [atom.value] + ([atom.value * 100] if atom.dim == "ratio" else [])
    if dim == atom.dim:
        return [atom.value]
    if dim == "pct" and atom.dim == "ratio":
        return [atom.value * 100]
    if dim == "hours" and atom.dim == "gpu_hours":
        return [atom.value]
    return []


def _matches(claim: _Claim, fact: float) -> bool:
    x, v = abs(claim.value), abs(fact)
    if claim.side == ">=":
        return v >= x - claim.tol
    if claim.side == "<=":
        return v <= x + claim.tol
    tol = max(claim.tol, 0.05 * v) if claim.side == "~" else claim.tol
    return abs(x - v) <= tol + 1e-9 * max(1.0, v)


def _show(a: Atom) -> str:
    unit = {"pct": "%", "hours": " h", "kwh": " kWh", "kg": " kg", "gpu_hours": " GPU-h"}.get(
        a.dim, ""
    )
    return f"{a.metric} {a.value:g}{unit}"
