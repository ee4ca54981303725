"""
The CDP hub relay: many DevTools-protocol clients share the user's browser through the
Gasoline extension's C{chrome.debugger}.

L{gasoline.relay.hub.Relay} is transport-free: the HTTP layer (L{gasoline.http.relay}) feeds it
parsed WebSocket messages from CDP clients and from the extension, and hands it objects that
provide L{gasoline.relay.model.IRelayPeer} to send to them. See docs/relay.md.
"""

from gasoline.relay.hub import Relay
from gasoline.relay.model import CDPClient, CDPError, IRelayPeer, RelayRefused

__all__ = ["CDPClient", "CDPError", "IRelayPeer", "Relay", "RelayRefused"]
