// Gasoline — the extension's one chrome.debugger attachment per tab, shared by its two users: the
// CDP hub relay (lib/cdp.js, for CDP clients) and the agent's input session (worker/devtools.js,
// for hover, drag, key presses, dialogs and emulation). chrome.debugger allows an extension one
// attachment per tab, so each user holds it under its own name and the tab is detached only when
// the last holder lets go (the relay releasing its clients must not end the agent's session, nor
// the other way round).

const PROTOCOL_VERSION = '1.3';
const holders = new Map();  // tabId -> Set of holder names

/** Attaches to `tabId` (or adopts an attachment this extension already has) for `owner`. */
export async function attachTab(tabId, owner) {
  const set = holders.get(tabId);
  if (!set || set.size === 0) {
    try {
      await chrome.debugger.attach({ tabId }, PROTOCOL_VERSION);
    } catch (e) {
      // Attached already (a previous worker's attachment survived): adopt it.
      if (!/already attached/i.test(String(e && e.message))) throw e;
    }
  }
  if (!holders.has(tabId)) holders.set(tabId, new Set());
  holders.get(tabId).add(owner);
}

/** `owner` lets go of `tabId`; detaches when nobody else holds it. */
export async function detachTab(tabId, owner) {
  const set = holders.get(tabId);
  if (set) set.delete(owner);
  if (set && set.size > 0) return;
  holders.delete(tabId);
  try { await chrome.debugger.detach({ tabId }); } catch (_) { /* already gone */ }
}

/** Whether a holder other than `owner` holds `tabId`. */
export function heldByOthers(tabId, owner) {
  const set = holders.get(tabId);
  return !!set && [...set].some((o) => o !== owner);
}

/** The attachment ended (chrome.debugger.onDetach): nobody holds it any more. */
export function forgetTab(tabId) {
  holders.delete(tabId);
}
