"""The report's prose: the LLM's, checked claim by claim, or the templates'.

1. The prompt holds the facts (long lists cut to their worst entries, names pseudonymised on
   request) and the code's recommendations; never a secret (``_guard`` refuses to send a
   prompt that contains the API key).
2. The answer's claims are checked (``claims.check``). If any fails, the LLM gets one more try
   with the list of errors.
3. Sentences that still fail are replaced by the template sentence of their topic (or dropped
   when the template has none left); a recommendation that fails is replaced by the code's
   text. Each part keeps its origin, and the report marks it.

No LLM, or one that times out or errors after its retries: the templates alone.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpuwarden.reports import templates
from gpuwarden.reports._atoms import Index
from gpuwarden.reports.claims import check, sentences
from gpuwarden.reports.llm import LlmClient, LlmUnavailable, Usage
from gpuwarden.reports.model import Facts
from gpuwarden.reports.pseudonym import Pseudonyms
from gpuwarden.reports.recommend import Recommendation
from gpuwarden.wording import counted, plural

LLM = "llm"
TEMPLATE = "template"
#: The longest list of any one kind the prompt carries (worst first); the checker has them all.
PROMPT_LIST_MAX = 20

SYSTEM = """You write the narrative of a weekly GPU cluster report for the operators who run it.
Rules:
- Use only the numbers, dates, hostnames, GPU ids, GPU models, tenants and Xid codes in the facts
  JSON. Do not compute new numbers; you may round. Never invent a host, GPU or date.
- Name the host, GPU ("node7 GPU 3"), model or tenant right before each of its numbers, and say
  "fleet" for fleet-wide numbers. Write units (%, h, kWh, GPU-hours).
- Sections listed in "absent" have no data: say so, never guess them.
Answer in exactly this format, plain text:
SUMMARY:
<4 to 8 sentences: what happened this period and what matters most>
RECOMMENDATIONS:
[R1] <one or two sentences rewording recommendation R1, keeping its numbers>
[R2] ...
"""


@dataclass(frozen=True)
class Part:
    text: str
    origin: str  # LLM (checked) or TEMPLATE


@dataclass
class Prose:
    summary: list[Part]
    recommendations: list[tuple[Recommendation, Part]]
    source: str  # "llm", "templates"
    notes: list[str] = field(default_factory=list)
    usage: Usage | None = None
    first_errors: list[str] = field(default_factory=list)
    final_errors: list[str] = field(default_factory=list)


def template_prose(f: Facts, recs: list[Recommendation], note: str = "") -> Prose:
    return Prose(
        summary=[Part(s.text, TEMPLATE) for s in templates.summary(f)],
        recommendations=[(r, Part(r.text, TEMPLATE)) for r in recs],
        source="templates",
        notes=[note] if note else [],
    )


def prompt_facts(f: Facts) -> str:
    """The facts as the LLM sees them: long lists cut to their worst entries."""
    data = f.model_dump(mode="json")
    data["inventory"].pop("slots", None)
    if data.get("availability"):
        nodes = sorted(data["availability"]["by_node"], key=lambda n: n["availability_pct"])
        data["availability"]["by_node"] = nodes[:PROMPT_LIST_MAX]
    data["risk"]["gpus"] = data["risk"]["gpus"][:PROMPT_LIST_MAX]
    data["failures"]["items"] = data["failures"]["items"][:PROMPT_LIST_MAX]
    data["xids"]["by_code"] = data["xids"]["by_code"][:PROMPT_LIST_MAX]
    for key in ("added", "replaced", "missing"):
        data["inventory"][key] = data["inventory"][key][:PROMPT_LIST_MAX]
    if data.get("scheduler"):
        data["scheduler"]["by_tenant"] = data["scheduler"]["by_tenant"][:PROMPT_LIST_MAX]
    if data.get("namespaces"):
        data["namespaces"] = data["namespaces"][:PROMPT_LIST_MAX]
    if data.get("sleep"):  # most kWh saved first
        data["sleep"]["by_node"] = data["sleep"]["by_node"][:PROMPT_LIST_MAX]
    if data.get("cost"):
        top = sorted(data["cost"]["by_tenant"].items(), key=lambda kv: -kv[1])[:PROMPT_LIST_MAX]
        data["cost"]["by_tenant"] = dict(top)
    return json.dumps(data, separators=(",", ":"))


def messages(
    f: Facts, recs: list[Recommendation], names: Pseudonyms | None
) -> list[dict[str, str]]:
    hide = names.hide if names else (lambda s: s)
    rec_lines = "\n".join(f"[{r.id}] {r.text}" for r in recs) or "(none)"
    user = (
        f"Facts (JSON, version {f.version}):\n{hide(prompt_facts(f))}\n\n"
        f"Recommendations computed from the facts (reword each, keep its id):\n{hide(rec_lines)}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _guard(msgs: list[dict[str, str]], secrets: list[str]) -> None:
    for secret in secrets:
        if len(secret) >= 8 and any(secret in m["content"] for m in msgs):
            raise LlmUnavailable("the prompt would contain a secret; not sent")


def parse(answer: str) -> tuple[str, dict[str, str]]:
    """The summary text and the recommendations by id."""
    # markup around the two headings ("**SUMMARY:**", "## Recommendations") is the same heading
    answer = re.sub(r"(?im)^[#*_\s]*(summary|recommendations)[*_\s]*:?[*_\s]*$",
                    lambda m: m.group(1).upper() + ":", answer)  # fmt: skip
    head, _, tail = answer.partition("RECOMMENDATIONS:")
    summary = head.split("SUMMARY:", 1)[-1].strip()
    recs: dict[str, str] = {}
    for m in re.finditer(r"^\s*(?:[-*]\s*)?\[(R\d+)\]\s*(.+?)\s*$", tail, re.M):
        recs[m.group(1)] = m.group(2)
    return summary, recs


def _errors(summary: str, recs: dict[str, str], known: set[str], ix: Index) -> list[str]:
    out = [f'"{s}": {e.why}' for s, errs in check(summary, ix).items() for e in errs]
    for rid, text in recs.items():
        if rid not in known:
            out.append(f"[{rid}] is not one of the recommendations given")
        out += [f"[{rid}] {e.why}" for errs in check(text, ix).values() for e in errs]
    out += [f"[{rid}] is missing" for rid in sorted(known - set(recs))]
    return out


def llm_prose(
    f: Facts, ix: Index, recs: list[Recommendation], client: LlmClient,
    names: Pseudonyms | None = None,
) -> Prose:  # fmt: skip
    """The LLM's prose, checked, retried once, patched with templates where it still fails."""
    restore = names.restore if names else (lambda s: s)
    hide = names.hide if names else (lambda s: s)
    msgs = messages(f, recs, names)
    _guard(msgs, [client.config.api_key])
    known = {r.id for r in recs}
    try:
        raw = client.complete(msgs)
        summary, by_id = parse(restore(raw))
        first = errors = _errors(summary, by_id, known, ix)
        if errors:
            msgs += [
                {"role": "assistant", "content": raw},
                {"role": "user", "content": "These claims are not supported by the facts:\n"
                 + hide("\n".join(f"- {e}" for e in errors))
                 + "\nWrite the whole answer again in the same format, fixing every one."},
            ]  # fmt: skip
            raw = client.complete(msgs)
            summary, by_id = parse(restore(raw))
            errors = _errors(summary, by_id, known, ix)
    except LlmUnavailable as exc:
        prose = template_prose(f, recs, f"LLM unavailable ({exc}): template text only.")
        prose.usage = client.usage
        return prose
    prose = Prose(summary=_patch(summary, f, ix), recommendations=[], source=LLM,
                  usage=client.usage, first_errors=first, final_errors=errors)  # fmt: skip
    for r in recs:
        text = by_id.get(r.id, "")
        ok = bool(text) and not check(text, ix)
        prose.recommendations.append((r, Part(text, LLM) if ok else Part(r.text, TEMPLATE)))
    replaced = sum(p.origin == TEMPLATE for p in prose.summary) + sum(
        p.origin == TEMPLATE for _, p in prose.recommendations
    )
    if first:
        prose.notes.append(f"The first answer had {counted(len(first), 'unsupported claim')}; the "
                           "LLM was asked once more with the list.")  # fmt: skip
    if replaced:
        prose.notes.append(f"{counted(replaced, 'part')} that still failed the check "
                           f"{plural(replaced, 'is', 'are')} template text.")  # fmt: skip
    return prose


def _patch(summary: str, f: Facts, ix: Index) -> list[Part]:
    """The summary's sentences; each failing one replaced by an unused template sentence of its
    topic, or dropped."""
    failing = check(summary, ix)
    spare = templates.summary(f)
    parts: list[Part] = []
    for s in sentences(summary):
        if s not in failing:
            parts.append(Part(s, LLM))
            continue
        lowered = s.lower()
        for topic, words in templates.TOPIC_WORDS.items():
            match = next((t for t in spare if t.topic == topic), None)
            if match and re.search(words, lowered):
                spare.remove(match)
                parts.append(Part(match.text, TEMPLATE))
                break
    return parts
