// Gasoline — the worker's HTTP to the daemon: every request carries the extension's headers; none
// but /health and /pairing goes out before the daemon proved it is the paired one (lib/pairing.js),
// and each is sealed under the session key.

import { createPairing } from '../lib/pairing.js';
import { loadSettings } from './config.js';

export const VERSION = chrome.runtime.getManifest().version;
const HEADERS = {
  'Content-Type': 'application/json',
  'X-Gasoline-Client': `gasoline-extension/${VERSION}`,
  'X-Gasoline-Extension-Version': VERSION,
};
export const POST_TIMEOUT_MS = 8000;
export const HEALTH_TIMEOUT_MS = 3000;
// This worker's run (a restarted worker is another session: /sync, the status snapshot).
export const EXT_SESSION_ID = `ext_${Date.now()}_${Math.random().toString(36).slice(2, 10)}`;

async function rawFetch(path, { method = 'POST', body, headers = {}, timeout = POST_TIMEOUT_MS } = {}) {
  const s = await loadSettings();
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeout);
  try {
    return await fetch(s.serverUrl + path, {
      method,
      headers: Object.assign({}, HEADERS, headers),
      body,
      signal: ctrl.signal,
      cache: 'no-store',
    });
  } catch (e) {
    // Nothing answered (the daemon is down, or was): whoever answers next proves itself again.
    pairing.reset();
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

// The daemon proves its identity before anything but /health and /pairing is sent (lib/pairing.js).
export const pairing = createPairing({
  fetchDaemon: (path, init) => rawFetch(path, Object.assign({ timeout: HEALTH_TIMEOUT_MS }, init)),
  getPinned: () => loadSettings().then((s) => s.daemonIdentity),
});

/**
 * A JSON request to the daemon: only once the daemon proved it is the paired one (except /health),
 * and sealed under the session key (lib/pairing.js). The answer carries `sealIv` and `session`
 * (to open a sealed answer). A daemon that no longer knows the session (it restarted) is
 * challenged again and the request sent once more.
 */
export async function daemonFetch(path, { method = 'POST', body, timeout = POST_TIMEOUT_MS, headers } = {}) {
  const json = body === undefined ? undefined : JSON.stringify(body);
  if (path === '/health') return rawFetch(path, { method, headers, timeout, body: json });
  for (let attempt = 0; ; attempt += 1) {
    const session = await pairing.ensureSession();
    const sealed = await pairing.seal(session, method, path, new TextEncoder().encode(json === undefined ? '' : json));
    const resp = await rawFetch(path, { method, timeout, body: sealed.body, headers: Object.assign({}, headers, sealed.headers) });
    if (resp.headers.get('X-Gasoline-Session-Status') === 'unknown') {
      pairing.reset(); // the daemon restarted: challenge it again (an impostor fails there)
      if (attempt === 0) continue;
      throw new Error(`${path}: the daemon no longer knows this session (it restarted): pairing again`);
    }
    resp.sealIv = sealed.iv;
    resp.session = session;
    return resp;
  }
}
