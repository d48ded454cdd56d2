"""Deprecated: the Xid table moved to ``gpuwarden.health`` with the rest of the health
vocabulary. This module keeps old imports working and will be removed in a later release."""

from __future__ import annotations

import warnings

from gpuwarden.health import APPLICATION_XIDS, FATAL_XIDS, XIDS, Xid, XidClass, describe

warnings.warn(
    "gpuwarden.xid is deprecated: import Xid, XIDS, FATAL_XIDS and describe from gpuwarden.health",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["APPLICATION_XIDS", "FATAL_XIDS", "XIDS", "Xid", "XidClass", "describe"]
