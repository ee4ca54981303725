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
    #: The HTTP status of its answer on an HTTP route (L{gasoline.http.dispatch.answer_failure}).
    http_status = 400

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

    def add_details(self, **details: Any) -> None:
        """Add what a caller up the stack knows about the failure to L{details} (the aliases a
        translated call used, how many of its calls were done)."""
        self.details.update(details)

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


class ClientProofRefused(GasolineError):
    """A caller named a client id (C{X-Gasoline-Client}) without its proof (403): the client id
    is whoever holds the daemon's client key (gasoline.core.trust.clientkey)."""

    code = "client_proof"
    retry = ("Send X-Gasoline-Client-Proof with X-Gasoline-Client: `gasoline client-proof <id> "
             "[--state-dir DIR]` prints it (HMAC-SHA256 of the id under <state-dir>/client-key; "
             "docs/security.md), or send no X-Gasoline-Client to get a client id of your own.")


class SessionOwnerRefused(ClientProofRefused):
    """A request used a session id (C{Mcp-Session-Id}, C{/mcp/messages/<id>}, C{/session/<id>})
    without proving the client id that opened the session, or naming an id when the session was
    opened without one (403): a session id is not a credential on its own."""

    code = "session_owner"
    retry = ("Use the session with the same identity that opened it: the same X-Gasoline-Client "
             "and X-Gasoline-Client-Proof, or none at all if it was opened without them.")


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
    """The extension ran the command and reported an error (its text is in the message). A
    code the extension names (L{EXTENSION_CODES}) becomes the error's own C{code} and hint."""

    code = "extension_error"
    retry = "Check the selector/parameters against the page; the error text comes from the extension."


#: The extension's own error codes (extension/content/commands.js, lib/policy.js, lib/scripts.js,
#: background.js), each with whether the same call may succeed later unchanged and what to do.
#: A result naming one of them fails with that code (not the generic C{extension_error}).
EXTENSION_CODES: dict[str, tuple[bool, str]] = {
    "file_url_refused": (False, "The user has not allowed agents on local files: ask them to tick "
                         "\"Let agents open and act on local file: pages\" in the Gasoline options "
                         "page (and \"Allow access to file URLs\" for Gasoline in "
                         "chrome://extensions), or serve the page over http://localhost."),
    "element_not_found": (False, "No element matches the selector: check it against the page "
                          "(interact list_interactive or get_text), wait for it (interact "
                          "wait_for), or use another selector."),
    "stale_ref": (False, "The tab navigated or reloaded since the snapshot that gave this ref: take "
                  "a new snapshot (observe {what:\"snapshot\"}) and use its refs."),
    "invalid_selector": (False, "The selector is neither valid CSS nor a semantic selector "
                         "(text=, role=, label=, placeholder=, testid=, ...): fix its syntax."),
    "option_not_found": (False, "The <select> has no such option; the error's options field lists "
                         "the values it has."),
    "timeout": (True, "Nothing matched in time: the page may still be loading; retry, raise "
                "timeout_ms, or check the selector."),
    "pilot_disabled": (False, "Ask the user to turn on 'AI Web Pilot' in the Gasoline popup; "
                       "reading modes work without it."),
    "no_tracked_tab": (False, "No tab is tracked: ask the user to click 'Track this tab' in the "
                       "Gasoline popup (or open one with interact new_tab if they let agents "
                       "track tabs)."),
    "tab_not_tracked": (False, "That tab is not tracked: use a tracked one (observe tabs), or ask "
                        "the user to track it in the Gasoline popup."),
    "no_tab": (False, "That tab no longer exists: list the open tabs with observe tabs."),
    "tab_not_visible": (True, "The tab is not the visible one in its window: switch to it "
                        "(interact switch_tab) or call without if_active."),
    "result_too_large": (False, "Narrow the selector or lower the limit: the result is larger than "
                         "the extension sends."),
    "result_not_json": (False, "Return plain JSON values (strings, numbers, arrays, objects) from "
                        "the script."),
    "execution_error": (False, "The script threw in the page: the message (and stack) come from "
                        "the page; fix the script."),
    "isolated_world_unavailable": (False, "The page cannot run the script in an isolated world: "
                                   "run it in the page's world (world:\"main\")."),
    "axe_unavailable": (True, "axe-core could not be loaded in this page (its CSP may block it): "
                        "reload the page and retry."),
    "no_history": (False, "The tab has no page to go back (or forward) to: navigate to the URL "
                   "instead (interact navigate)."),
    "unknown_action": (False, "Use one of the actions the interact schema lists."),
    "dialog_pending": (False, "A JavaScript dialog (alert/confirm/prompt) waits in the tab: answer "
                       "it with interact {what:\"dialog\", accept:true|false} (a prompt: "
                       "prompt_text), then retry; navigate passes it."),
    "no_dialog": (False, "No dialog is open in the tab (it was answered, or dismissed by default): "
                  "check the page (interact get_text)."),
    "upload_failed": (True, "The extension could not hand the screenshot to the daemon: retry; "
                      "if it persists, check the daemon's log."),
    "decode_failed": (False, "An image could not be decoded: take the screenshot again."),
    "not_found": (False, "No such item: list them first (the message says how)."),
    "command_failed": (False, "The command failed in the page; the message says why."),
    "invalid_param": (False, "Fix the parameter the message names."),
    "missing_param": (False, "Add the parameter the message names."),
}
