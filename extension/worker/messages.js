// Gasoline — messages to the worker: annotations from the draw-mode overlay (content scripts), and
// from the extension's own pages (popup, options) the status, tracking, pairing and health.

import { STORAGE_KEYS } from '../lib/settings.js';
import { storeAnnotation } from '../lib/annotations.js';
import { addTrackedTab, untrackTab } from '../lib/tracking.js';
import { loadSettings } from './config.js';
import { pairing } from './daemon.js';
import { connection } from './status.js';
import { statusSnapshot, refreshHealth, wakeSync } from './sync.js';
import { reportDomChanges } from './domwatch.js';

/**
 * Registers the message listener (once, at the worker's top level). `onPaired` runs once the
 * popup's "Pair" pinned the daemon's key: by default it wakes the /sync loop, so the worker pairs
 * at once instead of after its current wait. (`pair` and `onPaired` are replaceable for tests.)
 */
export function installMessages({ pair = pairWith, onPaired = wakeSync } = {}) {
  chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
    if (!msg || typeof msg.type !== 'string') return false;
    if (msg.type === 'gasoline:annotation') {
      if (!sender.tab || !msg.annotation || typeof msg.annotation !== 'object') return false;
      if (JSON.stringify(msg.annotation).length > 64 * 1024) return false;
      storeAnnotation(msg.annotation, sender.tab);
      return false;
    }
    if (msg.type === 'gasoline:dom_change') {
      if (!sender.tab || sender.id !== chrome.runtime.id) return false;
      reportDomChanges(msg, sender.tab);
      return false;
    }
    // Everything below is for the extension's own pages (popup, options), never for content scripts.
    if (!sender.url || !sender.url.startsWith(chrome.runtime.getURL(''))) return false;
    if (msg.type === 'gasoline:status') {
      loadSettings().then(() => sendResponse(statusSnapshot()));
      return true;
    }
    if (msg.type === 'gasoline:track') {
      (msg.tracked ? addTrackedTab(msg.tabId) : untrackTab(msg.tabId)).then(() => sendResponse({ ok: true }), (e) => sendResponse({ ok: false, error: String(e) }));
      return true;
    }
    if (msg.type === 'gasoline:pair') {
      pair(msg.fingerprint).then((answer) => {
        if (answer && answer.ok) onPaired();
        sendResponse(answer);
      }, (e) => sendResponse({ ok: false, error: String((e && e.message) || e) }));
      return true;
    }
    if (msg.type === 'gasoline:unpair') {
      chrome.storage.local.remove(STORAGE_KEYS.daemonIdentity).then(() => sendResponse({ ok: true }));
      return true;
    }
    if (msg.type === 'gasoline:health') {
      refreshHealth().then(() => sendResponse({ health: connection().health, status: statusSnapshot() }));
      return true;
    }
    return false;
  });
}

// The user confirmed the fingerprint the popup showed: pin the key the daemon offers now, if it is
// still the one with that fingerprint.
async function pairWith(fingerprint) {
  const offer = await pairing.offered();
  if (!offer) return { ok: false, error: 'the server at this port does not offer Gasoline pairing' };
  if (offer.fingerprint !== fingerprint) return { ok: false, error: `the daemon now offers ${offer.fingerprint}, not ${fingerprint}: compare again` };
  const s = await loadSettings();
  await chrome.storage.local.set({
    [STORAGE_KEYS.daemonIdentity]: { key: offer.key, fingerprint: offer.fingerprint, paired_at: new Date().toISOString(), server_url: s.serverUrl },
  });
  return { ok: true, fingerprint: offer.fingerprint };
}
