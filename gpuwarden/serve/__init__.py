"""``gpuwarden serve``: the long-running risk loop with its HTTP API.

    service.py     collect -> store -> assess -> decide -> act, every interval
    assessors.py   where risk scores come from (the model, hard signals, or --assess)
    api.py         FastAPI: health, /metrics, GPU states, audit log, overrides, /alertmanager
    server.py      the API under uvicorn in a thread (``lifecycle.AppServer``); run_serve
    cli.py         the click command ``serve``
    demo.py, history_demo.py   the risk loop as ``gpuwarden demo`` narrates it

fastapi is imported only here and by the scheduler's API, uvicorn only when a server starts,
so the rest of gpuwarden imports without them.
"""

from gpuwarden.serve.service import Assessor, RiskService

__all__ = ["Assessor", "RiskService"]
