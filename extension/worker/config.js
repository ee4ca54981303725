// Gasoline — the worker's copy of its settings (chrome.storage.local, read through
// lib/settings.js), read once and again after every change in that area.

import { settingsFromStorage } from '../lib/settings.js';

// `current`: what the last read found (null before the first); `reading`: the read under way or done.
const cache = { current: null, reading: null };

/** Resolves to the settings (lib/settings.js settingsFromStorage shape), read once until they change. */
export function loadSettings() {
  if (!cache.reading) {
    cache.reading = chrome.storage.local.get(null).then((raw) => {
      cache.current = settingsFromStorage(raw);
      return cache.current;
    });
  }
  return cache.reading;
}

/** The settings last read, or null before the first read finished. */
export function currentSettings() {
  return cache.current;
}

/** The stored settings changed: read them again; resolves to {before, now}. */
export function reloadSettings() {
  const before = cache.current;
  cache.reading = null;
  return loadSettings().then((now) => ({ before, now }));
}

const pinnedKey = (s) => (s && s.daemonIdentity ? s.daemonIdentity.key : '');

/** Whether `now` talks to another daemon than `before` (another URL, or another pinned identity). */
export function daemonChanged(before, now) {
  return !before || before.serverUrl !== now.serverUrl || pinnedKey(before) !== pinnedKey(now);
}

/** Whether `now` tracks other tabs than `before`. */
export function trackingChanged(before, now) {
  return !before || before.trackedTabId !== now.trackedTabId || before.trackAllTabs !== now.trackAllTabs
    || String(before.extraTabs) !== String(now.extraTabs);
}

/** Whether `now` differs from `before` in what a /sync reports beside the tracked tabs (the
 * pilot, the tracked page's URL and title, the capture switches): the daemon is told at once. */
export function reportedSettingsChanged(before, now) {
  if (!before) return true;
  return ['pilotEnabled', 'trackedTabUrl', 'trackedTabTitle', 'captureLogs', 'captureNetwork', 'captureWebSocket', 'captureActions']
    .some((k) => before[k] !== now[k]);
}

/** Whether any tab is tracked. */
export function tracksAnything(s) {
  return !!(s.trackedTabId || s.trackAllTabs || s.extraTabs.length);
}
