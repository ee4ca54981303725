"""
The interfaces that are seams: each has a second implementation, an in-memory fake.

L{ISessionTools} is what the MCP layer (C{McpSession.extra_tools}) knows of a session's own tools:
the session proxy implements it (L{gasoline.proxy.routing.SessionTools}) and so does the in-memory
L{gasoline.testing.FakeSessionTools}, which C{tests/test_testing.py} puts behind a real MCP
server. (The relay's L{gasoline.relay.model.IRelayPeer} is the other seam, beside its hub, with
L{gasoline.relay.testing.FakeExtensionLink}.)

The client state the layers above the core hold (client registry, per-client state, telemetry
store, query router) is typed by the interfaces of L{gasoline.core.interfaces}, each with its real
implementation and an in-memory fake in L{gasoline.testing_fakes}. The core's other classes
(notifier, command queue, extension link) have one implementation each and are used by their
concrete types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zope.interface import Interface

if TYPE_CHECKING:
    from gasoline.mcp.tools import Tool


class ISessionTools(Interface):
    """Tools one MCP session sees beside the server's own (C{McpSession.extra_tools}).

    The MCP layer knows nothing of where they come from (a proxy session's child servers, say):
    it lists their definitions after its own and looks a name up here when its own registry has
    no tool by that name. Calls go through the same registry processing (rate limit, redaction,
    audit) as the server's own tools.
    """

    def definitions() -> list[dict[str, Any]]:
        """The tools' MCP definitions (C{name}, C{description}, C{inputSchema}, ...), a list."""

    def get(name: str) -> Tool | None:
        """The L{gasoline.mcp.tools.Tool} called C{name}, or None."""

    def progress(params: dict[str, Any]) -> None:
        """The agent sent C{notifications/progress} with C{params} (for a request the session's
        tools made of it, such as a relayed C{sampling/createMessage}); pass it on or drop it."""
