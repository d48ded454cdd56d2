"""What ``gpuwarden serve`` decided: the Decisions page and the tag status of flagged GPUs.

Both read serve's API (``/v1/audit``, ``/v1/gpus``, ``/v1/breaker``) through ``_cache.api_get``;
the override form POSTs ``/v1/gpus/{uuid}/state`` with a serve token the person pastes for their
session (``_gate``), never ``GPUWARDEN_SERVE_TOKEN``, which only reads. Without a serve URL the
page says how to start one, and the tag status reads "serve not configured".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pandas as pd
import streamlit as st

from gpuwarden.dashboard import _cache, _gate
from gpuwarden.dashboard._api import Api, ApiError
from gpuwarden.health import GpuState

STATES = tuple(GpuState)
AUDIT_LIMIT = 2000
NOT_CONFIGURED = "serve not configured"
_DONE_KEY = "_override_done"  # serve's answer to the last override, shown after the rerun
_CLEAR_TOKEN_KEY = "_override_clear_token"  # empty the token field on the next run
AUDIT_COLUMNS = ["time", "gpu", "change", "actor", "source", "reasons", "hook", "result", "uuid"]


def fmt_utc(ts: float | None, fmt: str = "%Y-%m-%d %H:%M:%S UTC") -> str:
    if ts is None or ts != ts:
        return ""
    return pd.Timestamp(ts, unit="s", tz="UTC").strftime(fmt)


def audit_frame(rows: list[dict[str, Any]], *, hooks: bool = False) -> pd.DataFrame:
    """serve's audit rows -> one row per decision (``hooks``: and per hook action), newest
    first: time (UTC), gpu (node/index), change (old -> new), actor, source, reasons, hook,
    result, uuid."""
    picked = [r for r in rows if hooks or r.get("hook") is None]
    if not picked:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in AUDIT_COLUMNS})
    picked.sort(key=lambda r: (r["ts"], r.get("id", 0)), reverse=True)
    return pd.DataFrame(
        {
            "time": [fmt_utc(r["ts"]) for r in picked],
            "gpu": [f"{r['hostname']}/{r['gpu']}" for r in picked],
            "change": [f"{r['old_state']} -> {r['new_state']}" for r in picked],
            "actor": [r["actor"] for r in picked],
            "source": [r["source"] for r in picked],
            "reasons": ["; ".join(r.get("reasons") or []) for r in picked],
            "hook": [r.get("hook") or "" for r in picked],
            "result": [r.get("result", "") for r in picked],
            "uuid": [r["uuid"] for r in picked],
        }
    )


def tag_statuses(gpus: list[dict[str, Any]], breaker: Mapping[str, Any]) -> dict[str, str]:
    """uuid -> one line on what serve holds for the GPU's node tag: its state, since when and
    why (source), firing alerts, a pin by a person, a re-tag the circuit breaker holds back."""
    held: dict[str, list[str]] = {}
    for h in breaker.get("held", []):
        held.setdefault(h["hostname"], []).append(f"{h['hook']} -> {h['new_state']}")
    out = {}
    for g in gpus:
        parts = [f"{g['state']} since {fmt_utc(g.get('since'), '%m-%d %H:%M UTC')} ({g['source']})"]
        if g.get("firing_alerts"):
            parts.append("alerts: " + ", ".join(g["firing_alerts"]))
        if g.get("pinned_until"):
            parts.append("pinned until " + fmt_utc(g["pinned_until"], "%m-%d %H:%M UTC"))
        if g["hostname"] in held:
            parts.append("held by circuit breaker: " + ", ".join(held[g["hostname"]]))
        out[g["uuid"]] = " · ".join(parts)
    return out


def tag_column(serve: Api | None, uuids: list[str]) -> list[str]:
    """The "tag status" of each GPU in ``uuids`` (a note, not an error, when serve is not
    configured or does not answer)."""
    if serve is None:
        return [NOT_CONFIGURED] * len(uuids)
    try:
        gpus = _cache.api_get(serve.base_url, "/v1/gpus", (), serve)
        breaker = _cache.api_get(serve.base_url, "/v1/breaker", (), serve)
    except ApiError as exc:
        st.caption(f"Tag status unavailable: {exc}")
        return ["serve unreachable"] * len(uuids)
    status = tag_statuses(gpus, breaker)
    return [status.get(u, "not known to serve") for u in uuids]


def how_to_start_serve() -> None:
    st.info("No `gpuwarden serve` is configured, so there are no decisions to show.")
    st.markdown("Start the risk service over the same store, then point the dashboard at it:")
    st.code(
        "export GPUWARDEN_API_TOKEN=$(openssl rand -hex 16)\n"
        "gpuwarden serve --store sqlite:///gpuwarden.db --listen 127.0.0.1:9401\n"
        "gpuwarden dashboard --store sqlite:///gpuwarden.db --serve-url http://127.0.0.1:9401",
        language="sh",
    )
    st.caption(
        "serve's reads need no token. To override a state, a person pastes serve's token into "
        "the form for their session; the dashboard does not hold it."
    )


def page(serve: Api | None) -> None:
    """The Decisions page: serve's audit log, filtered, and the override form."""
    st.title("Decisions")
    if serve is None:
        how_to_start_serve()
        return
    st.caption(f"From `gpuwarden serve` at `{serve.base_url}` · times are UTC")
    try:
        rows = _cache.api_get(serve.base_url, "/v1/audit", (("limit", AUDIT_LIMIT),), serve)
        gpus = _cache.api_get(serve.base_url, "/v1/gpus", (), serve)
    except ApiError as exc:
        st.error(f"Cannot read the decisions: {exc}")
        return
    left, middle, right = st.columns([2, 2, 1])
    labels = {g["uuid"]: f"{g['hostname']}/{g['gpu']}" for g in gpus}
    gpu = left.selectbox(
        "GPU", ["all", *sorted(labels, key=labels.__getitem__)],
        format_func=lambda u: "all GPUs" if u == "all" else labels[u], key="decisions_gpu",
    )  # fmt: skip
    actors = sorted({r["actor"] for r in rows})
    actor = middle.selectbox("Actor", ["all", *actors], key="decisions_actor")
    hooks = right.checkbox("Hook actions", key="decisions_hooks", help="Also the rows of "
                           "each hook (Slurm, Kubernetes, Slack) that acted on a decision")  # fmt: skip
    table = audit_frame(rows, hooks=hooks)
    if gpu != "all":
        table = table[table["uuid"] == gpu]
    if actor != "all":
        table = table[table["actor"] == actor]
    st.markdown(f"**{len(table)}** of the last {len(rows)} audit rows")
    shown = table if hooks else table.drop(columns=["hook", "result"])
    st.dataframe(
        shown,
        hide_index=True,
        key="decisions_table",
        column_config={
            "time": "time (UTC)",
            "change": "old -> new",
            "reasons": st.column_config.TextColumn("reasons", width="large"),
        },
    )
    _override_form(serve, gpus)


def _override_form(serve: Api, gpus: list[dict[str, Any]]) -> None:
    """serve's ``POST /v1/gpus/{uuid}/state`` with the token the person pastes (kept for their
    browser session), never with the dashboard's own ``GPUWARDEN_SERVE_TOKEN``: whoever can
    load the page can use that one, so it only reads."""
    st.subheader("Override a GPU's state")
    if not gpus:
        st.caption("serve knows no GPU yet.")
        return
    done = st.session_state.pop(_DONE_KEY, None)
    if done:
        st.success(done)
    if st.session_state.pop(_CLEAR_TOKEN_KEY, False):  # kept by now; empty the field itself
        st.session_state["override_token"] = ""
    kept = _gate.session_serve_token()
    labels = {g["uuid"]: f"{g['hostname']}/{g['gpu']} ({g['state']})" for g in gpus}
    hint = "kept for this session" if kept else "the GPUWARDEN_API_TOKEN serve runs with"
    with st.form("override", clear_on_submit=False):
        uuid = st.selectbox("GPU", list(labels), format_func=labels.__getitem__, key="override_gpu")
        state = st.selectbox("New state", STATES, key="override_state")
        reason = st.text_input(
            "Reason", placeholder="reseated; DCGM diag level 3 passed", key="override_reason"
        )
        actor = st.text_input("Your name", key="override_actor")
        pasted = st.text_input(
            "Your serve token", type="password", key="override_token", placeholder=hint
        )
        st.caption(
            "A change is sent with the serve token you paste here, not with the dashboard's own "
            "(GPUWARDEN_SERVE_TOKEN only reads). It is kept for this browser session only: "
            "never shown, logged or stored. serve pins a person's decision for its manual hold, "
            "then the model and alerts decide again."
        )
        sent = st.form_submit_button("Apply", key="override_apply")
    if kept and st.button("Forget my serve token", key="override_forget"):
        _gate.forget_serve_token()
        st.rerun()
    if not sent:
        return
    body = {"state": state, "reason": reason.strip(), "actor": actor.strip()}
    if not body["reason"] or not body["actor"]:
        st.error("A decision needs a reason and your name.")
        return
    token = pasted.strip() or kept
    if not token:
        st.error("Paste your serve token (the GPUWARDEN_API_TOKEN serve runs with) to apply.")
        return
    try:
        answer = replace(serve, token=token).post(f"/v1/gpus/{uuid}/state", body)
    except ApiError as exc:
        if exc.status in (401, 403):
            _gate.forget_serve_token()  # a wrong token is no use for the next try either
        st.error(str(exc))
        return
    _gate.keep_serve_token(token)
    st.session_state[_CLEAR_TOKEN_KEY] = True
    t = answer["transition"]
    hooks = "; ".join(f"{h.get('hook')}: {h.get('result')}" for h in answer.get("hooks", []))
    st.session_state[_DONE_KEY] = (
        f"{t['hostname']}/{t['gpu']}: {t['old_state']} -> {t['new_state']} by {t['actor']}"
        + (f" · {hooks}" if hooks else "")
    )
    _cache.clear()
    st.rerun()  # draw the audit log again, with the new decision in it
