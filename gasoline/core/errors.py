"""Domain errors. Core code raises these; ``http/`` and ``mcp/`` map them at the edge."""

from __future__ import annotations

from typing import Any


class GasolineError(Exception):
    """An error with a stable machine-readable C{code} and a retry hint for agents."""

    code = "internal_error"
    retry = ""

    def __init__(self, message: str, *, code: str | None = None, retry: str | None = None,
                 **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retry is not None:
            self.retry = retry
        self.details = details

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.retry:
            out["retry"] = self.retry
        out.update(self.details)
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
