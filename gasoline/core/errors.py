"""
Domain errors. Core code raises these; C{http/} and C{mcp/} map them at the edge.

The error contract (C{docs/mcp.md}, "Errors"): every structured error carries C{error} (a stable
code), C{message}, C{retryable} (a boolean: may the very same call succeed later without the caller
changing anything?) and, when it has one, the C{retry} hint (what to do, in words). When the error
knows how long to wait, C{retry_after_ms} says so (an integer number of milliseconds).
"""

from __future__ import annotations

from typing import Any


#: Codes whose calls may succeed if repeated unchanged later (a transient condition: the
#: extension is busy or away, a queue or a rate window is full). Everything else needs the caller
#: to change something first (a parameter, a name, a setting) and is C{retryable: false}.
RETRYABLE_CODES = frozenset({
    "extension_timeout", "extension_disconnected", "queue_full", "rate_limited",
    "too_many_clients", "timeout", "daemon_unavailable", "internal_error",
})


def is_retryable(code: str) -> bool:
    """The default C{retryable} of an error with this C{code} (L{RETRYABLE_CODES})."""
    return code in RETRYABLE_CODES


class GasolineError(Exception):
    """An error with a stable machine-readable C{code}, a retry hint for agents, whether it is
    worth retrying unchanged (C{retryable}) and, when known, how long to wait first
    (C{retry_after_ms})."""

    code = "internal_error"
    retry = ""
    #: C{None}: decided by the code (L{is_retryable}).
    retryable: bool | None = None
    retry_after_ms: int | None = None

    def __init__(self, message: str, *, code: str | None = None, retry: str | None = None,
                 retryable: bool | None = None, retry_after_ms: int | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retry is not None:
            self.retry = retry
        if retryable is not None:
            self.retryable = retryable
        if retry_after_ms is not None:
            self.retry_after_ms = max(0, int(retry_after_ms))
        self.details = details

    @property
    def is_retryable(self) -> bool:
        return self.retryable if self.retryable is not None else is_retryable(self.code)

    def contract(self) -> dict[str, Any]:
        """C{error}, C{message}, C{retryable}, and C{retry} / C{retry_after_ms} when set."""
        out: dict[str, Any] = {"error": self.code, "message": self.message,
                               "retryable": self.is_retryable}
        if self.retry:
            out["retry"] = self.retry
        if self.retry_after_ms is not None:
            out["retry_after_ms"] = self.retry_after_ms
        return out

    def to_json(self) -> dict[str, Any]:
        out = dict(self.details)
        out.update(self.contract())  # the contract's fields win over same-named details
        return out


class TooManyClients(GasolineError):
    code = "too_many_clients"
    retry = "Disconnect an idle client (DELETE /clients/<id>) or raise --max-clients."


class UnknownClient(GasolineError):
    code = "unknown_client"


class ExtensionDisconnected(GasolineError):
    code = "extension_disconnected"
    retry = "Open the browser with the Gasoline extension and make sure it points at this daemon."


class ExtensionTimeout(GasolineError):
    code = "extension_timeout"
    retry = "The page may be busy; retry, or use background:true and poll command_result."


class QueueFull(GasolineError):
    code = "queue_full"
    retry = "Wait for pending commands to finish (observe pending_commands), then retry."


class InvalidParam(GasolineError):
    code = "invalid_param"


class MissingParam(GasolineError):
    code = "missing_param"


class NotImplementedMode(GasolineError):
    code = "not_implemented"
    retry = "This mode is not built yet in this version of Gasoline."


class CommandCancelled(GasolineError):
    """The extension reported the command as cancelled."""

    code = "cancelled"


class ExtensionError(GasolineError):
    """The extension ran the command and reported an error (its text is in the message)."""

    code = "extension_error"
    retry = "Check the selector/parameters against the page; the error text comes from the extension."
