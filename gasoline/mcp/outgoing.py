"""
The redaction pass every message to an agent takes that is not a tool result.

Tool results are redacted by L{gasoline.mcp.tools.ToolRegistry.finish} (every content type, the
structured content, the result's C{_meta}). Everything else an agent reads from the MCP server
passes here:

 - notifications (C{notifications/message} log data, C{notifications/progress} messages, a
   proxied server's forwarded notifications): their C{params}, as values;
 - a server->client C{sampling/createMessage} a proxied server asks for: its messages and system
   prompt (an elicitation's schema is left alone: its property names are the questions);
 - JSON-RPC error responses (Gasoline's own, and a proxied server's C{error.message} and
   C{error.data}).

Pre-encoded messages (bytes: the streaming hub's, redacted once per event) are not looked at again.
"""

from __future__ import annotations

from typing import Any, Callable

from gasoline.core.redaction.redactor import Redactor

_REDACTOR = Redactor()
#: Notification parameters that are the protocol's own (C{progressToken} is no secret, whatever
#: its name says); every other parameter is redacted as a value.
_PROTOCOL_KEYS = frozenset({"progressToken", "requestId", "progress", "total", "level",
                            "logger", "uri"})


def _value(value: Any) -> Any:
    return value if _REDACTOR.unchanged(value) else _REDACTOR.redact_value(value)


def redact_outgoing(message: Any) -> Any:
    """C{message} (a JSON-RPC dict) with what an agent reads in it redacted; a new dict when
    something changed, the same one otherwise. Anything else is returned as it is."""
    if not isinstance(message, dict):
        return message
    method = message.get("method")
    if isinstance(method, str):
        params = message.get("params")
        if not isinstance(params, dict):
            return message
        if method.startswith("notifications/"):
            redacted = {k: v if k in _PROTOCOL_KEYS else _value(v) for k, v in params.items()}
        elif method == "sampling/createMessage":
            redacted = {k: _value(v) if k in ("messages", "systemPrompt") else v
                        for k, v in params.items()}
        else:
            return message
        return message if redacted is params or redacted == params else \
            {**message, "params": redacted}
    error = message.get("error")
    if isinstance(error, dict):
        redacted_error = redact_error(error)
        if redacted_error is not error:
            return {**message, "error": redacted_error}
    return message


def redact_error(error: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error object with its C{message} and C{data} redacted (the code kept)."""
    out = dict(error)
    changed = False
    for key in ("message", "data"):
        if key in error:
            value = _value(error[key])
            if value != error[key]:
                out[key] = value
                changed = True
    return out if changed else error


def redacting(emit: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], None]:
    """C{emit}, with every message it sends through L{redact_outgoing} first."""

    def send(message: dict[str, Any]) -> None:
        emit(redact_outgoing(message))

    return send
