"""Errors shared by the connector's modules (kept free of heavy imports)."""

from __future__ import annotations

from typing import Any


class RegistrationRefused(Exception):
    """C{POST /clients} answered with an error (e.g. C{too_many_clients}, 401 without the key)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        msg = None
        if isinstance(body, dict):
            msg = body.get("message") or body.get("error")
        detail = f"HTTP {status}: {msg}" if isinstance(msg, str) and msg else f"HTTP {status}"
        super().__init__(f"registration refused ({detail})")


class PermanentProblem(Exception):
    """The connector can never reach a daemon at its address as configured: something that is
    not a Gasoline daemon answers HTTP there, or the daemon refuses the connector (401 without
    the right C{--api-key}, 403 for a proof it cannot make). Waiting cannot fix it: the connector
    answers what is pending with this message and exits non-zero."""
