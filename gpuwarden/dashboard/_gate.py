"""Who may use the dashboard: its password gate and the serve token a person pastes.

The dashboard runs with service tokens in its environment (``GPUWARDEN_SERVE_TOKEN``,
``GPUWARDEN_SCHEDULER_TOKEN``, an admin token), so whoever loads a page reads with them. Two
rules keep that from being more than a read:

- ``GPUWARDEN_DASHBOARD_PASSWORD``: when set, every page asks for it before drawing anything
  (``unlocked``); a match is remembered in the browser session, not the password itself.
- A change (the Decisions page's override) is sent with a serve token the person pastes for
  their session (``session_serve_token``), never with the environment's; the environment's
  token is for reads only.

Neither secret is shown on a page, logged or used as a cache key.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping

import streamlit as st

from gpuwarden.dashboard.cli import PASSWORD_ENV

_UNLOCKED_KEY = "_dashboard_unlocked"  # True once this session gave the password
_SERVE_TOKEN_KEY = "_session_serve_token"  # the serve token this session pasted


def password_matches(given: str, password: str) -> bool:
    """``given == password`` in constant time (no early exit to time a guess by)."""
    return hmac.compare_digest(given.encode(), password.encode())


def unlocked(environ: Mapping[str, str] | None = None) -> bool:
    """True when the page may draw: no ``GPUWARDEN_DASHBOARD_PASSWORD``, or this session gave
    it. Otherwise draws the password form (and only that) and returns False."""
    password = (os.environ if environ is None else environ).get(PASSWORD_ENV, "")
    if not password or st.session_state.get(_UNLOCKED_KEY) is True:
        return True
    st.title("gpuwarden")
    with st.form("dashboard_login"):
        given = st.text_input("Dashboard password", type="password", key="dashboard_password")
        sent = st.form_submit_button("Open the dashboard", key="dashboard_open")
    st.caption(f"This dashboard asks for the password its server runs with ({PASSWORD_ENV}).")
    if sent:
        if password_matches(given, password):
            st.session_state[_UNLOCKED_KEY] = True
            st.rerun()
        st.error("That is not the dashboard's password.")
    return False


def session_serve_token() -> str | None:
    """The serve token this browser session pasted (None: none yet)."""
    token = st.session_state.get(_SERVE_TOKEN_KEY)
    return token if isinstance(token, str) and token else None


def keep_serve_token(token: str) -> None:
    """Remember ``token`` for this browser session only (server memory, never on disk)."""
    st.session_state[_SERVE_TOKEN_KEY] = token


def forget_serve_token() -> None:
    st.session_state.pop(_SERVE_TOKEN_KEY, None)
