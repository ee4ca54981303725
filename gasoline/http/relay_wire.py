"""
What the CDP relay's discovery routes (L{gasoline.http.relay}) and its WebSockets
(L{gasoline.http.relay_ws}) share: the endpoints' paths, the message limits and the extension
link's pings. A module of its own so that the WebSockets need nothing of the routes that load them
on first use (no import cycle).
"""

#: Largest message a CDP client may send (a big C{Runtime.evaluate} or file upload fits). With the
#: structural limit (L{gasoline.core.validate.MAX_JSON_TOKENS}, checked in
#: L{gasoline.relay.hub.Relay.client_text}) no client message costs the reactor more than a few
#: milliseconds to count and decode (docs/relay.md, "Limits").
MAX_CLIENT_MESSAGE = 16 * 1024 * 1024
#: Largest message the extension may send (a full-page screenshot answer fits).
MAX_EXTENSION_MESSAGE = 128 * 1024 * 1024
#: JSON values (L{gasoline.core.validate.json_tokens}) one extension message may carry: ten times
#: the HTTP bodies' limit, because Chrome's answers relayed for clients (a full accessibility
#: tree, a flattened DOM) legitimately hold more; about 30 ms of decoding at most.
EXTENSION_MAX_JSON_TOKENS = 1_000_000
#: Seconds between the daemon's WebSocket pings to the extension, and how long it waits for the
#: pong before it drops a vanished extension (its clients then get errors, not a hang).
EXTENSION_PING_INTERVAL = 20
EXTENSION_PING_TIMEOUT = 20
#: Path prefix of the CDP client endpoint and the extension's path.
CDP_PREFIX = "/cdp"
EXTENSION_PATH = "/extension/cdp"
