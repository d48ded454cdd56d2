"""``gpuwarden serve``: the long-running risk loop with its HTTP API.

    service.py     collect -> store -> assess -> decide -> act, every interval
    assessors.py   where risk scores come from (the model, hard signals, or --assess)
    api.py         FastAPI: health, /metrics, GPU states, audit log, overrides, /alertmanager
    server.py      uvicorn in a thread (tests use port 0); run_serve for the command
    cli.py         the click command ``serve``

fastapi and uvicorn are imported only here, so the rest of gpuwarden imports without them.
"""

from gpuwarden.serve.service import Assessor, RiskService

__all__ = ["Assessor", "RiskService"]
