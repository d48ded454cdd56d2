"""The weekly cluster report: facts computed by code, prose by an LLM, every number checked.

facts.py      the facts document for a period (model.py: its typed, versioned schema)
claims.py     the claim checker: every number, date, hostname and GPU id in LLM text
llm.py        the OpenAI-compatible client (streaming, retries, token counts)
writer.py     template text, the LLM's text checked and patched, the report assembled
render.py     Markdown and HTML with charts; slack.py posts it
"""

from gpuwarden.reports.facts import FactSources, build_facts, last_full_week
from gpuwarden.reports.model import FACTS_VERSION, Facts

__all__ = ["FACTS_VERSION", "FactSources", "Facts", "build_facts", "last_full_week"]
