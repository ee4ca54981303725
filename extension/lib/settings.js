// Gasoline — settings kept in chrome.storage.local (shared by the worker, popup and options page).
//
// trackedTabId / trackedTabUrl / trackedTabTitle are the keys the published Gasoline extension
// uses, so one test harness can drive both. Everything else is ours.

export const DEFAULT_PORT = 7890;
export const DEFAULT_SERVER_URL = `http://127.0.0.1:${DEFAULT_PORT}`;

export const STORAGE_KEYS = Object.freeze({
  serverUrl: 'serverUrl',                 // "http://127.0.0.1:<port>"
  trackedTabId: 'trackedTabId',           // primary tracked tab (0 / absent = none)
  trackedTabUrl: 'trackedTabUrl',
  trackedTabTitle: 'trackedTabTitle',
  extraTabs: 'gasolineTrackedTabs',       // more tracked tab ids (array of ints)
  trackAllTabs: 'gasolineTrackAllTabs',   // capture every tab
  pilotEnabled: 'aiWebPilotEnabled',      // let agents act (execute, navigate, click, type, ...)
  captureLogs: 'gasolineCaptureLogs',
  captureNetwork: 'gasolineCaptureNetwork',
  captureWebSocket: 'gasolineCaptureWebSocket',
  captureActions: 'gasolineCaptureActions',
  allowFileUrls: 'gasolineAllowFileUrls',     // agents may open / target file: URLs (options page)
  agentsMayTrack: 'gasolineAgentsMayTrack',   // new_tab / switch_tab may add to what is tracked (popup)
  daemonIdentity: 'gasolineDaemonIdentity',   // the pinned daemon identity {key, fingerprint, paired_at}
  launchedBy: 'gasolineLaunchedBy',       // {by, headless} when `gasoline browser` started this browser
});

/** Accepts a port number, "host:port" or a URL; returns "http://host:port" (loopback only). */
export function normalizeServerUrl(value) {
  if (value === undefined || value === null || value === '') return DEFAULT_SERVER_URL;
  const text = String(value).trim();
  if (/^\d+$/.test(text)) {
    const port = Number(text);
    if (port < 1 || port > 65535) throw new Error('port must be between 1 and 65535');
    return `http://127.0.0.1:${port}`;
  }
  const url = new URL(/^https?:\/\//i.test(text) ? text : `http://${text}`);
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) {
    throw new Error('the daemon must be on this machine (127.0.0.1, localhost or [::1])');
  }
  return `${url.protocol}//${url.host}`;
}

export function portOf(serverUrl) {
  try {
    const url = new URL(serverUrl);
    return Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  } catch (_) {
    return DEFAULT_PORT;
  }
}

const bool = (v, dflt) => (typeof v === 'boolean' ? v : dflt);
const launchedOf = (v) => (v && typeof v === 'object' ? { headless: v.headless === true } : null);
const identityOf = (v) => (v && typeof v === 'object' && typeof v.key === 'string' && v.key ? v : null);

export function settingsFromStorage(raw) {
  let serverUrl;
  try { serverUrl = normalizeServerUrl(raw[STORAGE_KEYS.serverUrl]); } catch (_) { serverUrl = DEFAULT_SERVER_URL; }
  const extra = Array.isArray(raw[STORAGE_KEYS.extraTabs]) ? raw[STORAGE_KEYS.extraTabs] : [];
  return {
    serverUrl,
    trackedTabId: Number(raw[STORAGE_KEYS.trackedTabId]) || 0,
    trackedTabUrl: String(raw[STORAGE_KEYS.trackedTabUrl] || ''),
    trackedTabTitle: String(raw[STORAGE_KEYS.trackedTabTitle] || ''),
    extraTabs: extra.map(Number).filter((n) => Number.isInteger(n) && n > 0),
    trackAllTabs: bool(raw[STORAGE_KEYS.trackAllTabs], false),
    pilotEnabled: bool(raw[STORAGE_KEYS.pilotEnabled], false),
    captureLogs: bool(raw[STORAGE_KEYS.captureLogs], true),
    captureNetwork: bool(raw[STORAGE_KEYS.captureNetwork], true),
    captureWebSocket: bool(raw[STORAGE_KEYS.captureWebSocket], true),
    captureActions: bool(raw[STORAGE_KEYS.captureActions], true),
    allowFileUrls: bool(raw[STORAGE_KEYS.allowFileUrls], false),
    agentsMayTrack: bool(raw[STORAGE_KEYS.agentsMayTrack], false),
    daemonIdentity: identityOf(raw[STORAGE_KEYS.daemonIdentity]),
    launchedBy: launchedOf(raw[STORAGE_KEYS.launchedBy]),
  };
}

/** Whether a tab's data may be captured; includeAll=false ignores the "track all tabs" option. */
export function isTrackedTab(s, tabId, includeAll = true) {
  if (!Number.isInteger(tabId) || tabId < 0) return false;
  if (includeAll && s.trackAllTabs) return true;
  return tabId === s.trackedTabId || s.extraTabs.includes(tabId);
}
