// Gasoline — the CDP link (docs/relay.md): the daemon's hub relay reaches the user's tabs through
// chrome.debugger, over one WebSocket from this worker to ws://<daemon>/extension/cdp.
//
// * Exposure: only tabs the user allowed are visible to CDP clients: tracked tabs while the AI Web
//   Pilot is on, plus the tabs a client created (Target.createTarget; the daemon shows those only to
//   that client). A tab that stops being exposed is detached at once.
// * Attach once per tab and count holders (one per client session); detach on the last release,
//   so no attachment (and no "is debugging this browser" infobar) outlives its clients.
// * Child targets (workers, out-of-process iframes) travel with source.sessionId.
// * onDetach is fanned out: canceled_by_user may cover every tab (all are reported);
//   target_closed on a tab that still exists is re-announced after a cooldown.
// * The daemon proves who it is before anything is sent or done: the link is opened only with a
//   verified pairing session (lib/pairing.js) and a fresh nonce, and its first message must be the
//   daemon's proof for them; until it has arrived and checked out, no tab is announced and no
//   request is handled (an impostor on the port never drives a tab). A bad or missing proof closes
//   the link and forgets the session, so the next attempt challenges the daemon again.
// * The link pings at least every 20 s (keeps the MV3 worker alive, Chrome >= 116) and reconnects
//   with back-off; on every (re)connect it first drops every attachment of the previous link (the
//   daemon dropped those sessions) and announces the exposed tabs afresh.
//
// Wire format (JSON text messages): daemon -> extension requests {id, method, params} answered
// {id, result} | {id, error:{code, message}}; notifications without id in both directions.

import { isTrackedTab } from './settings.js';
import { b64u, NotPaired } from './pairing.js';
import { attachTab, detachTab, forgetTab } from './debuggee.js';

const PING_MS = 15000;
const BACKOFF_MS = [250, 500, 1000, 2000, 5000, 10000, 20000];
const REATTACH_COOLDOWN_MS = 1000;
const LINK_BODY = new TextEncoder().encode('gasoline-cdp-link');

export function initCdpLink({ loadSettings, pairing, log = () => {} }) {
  let ws = null;
  let wsUrl = '';
  let verified = false;  // the open link's first message proved the daemon's identity
  let attempt = 0;
  let reconnectTimer = null;
  let pingTimer = null;
  let lastAnnounced = '';
  const holders = new Map();   // tabId -> number of client sessions holding it
  const created = new Map();   // tabId -> client id (tabs made by Target.createTarget)
  const cooldown = new Set();  // tabs waiting to be re-announced after target_closed
  const clients = { count: 0, ids: [] };

  // ---------------------------------------------------------------- exposure
  async function exposedTabIds() {
    await createdRestored;
    const s = await loadSettings();
    const tabs = await chrome.tabs.query({});
    const ids = new Set();
    for (const tab of tabs) {
      if (!Number.isInteger(tab.id) || cooldown.has(tab.id)) continue;
      if (created.has(tab.id) || (s.pilotEnabled && isTrackedTab(s, tab.id, false))) ids.add(tab.id);
    }
    return ids;
  }

  async function isExposed(tabId) {
    return (await exposedTabIds()).has(tabId);
  }

  async function targetList() {
    const ids = await exposedTabIds();
    if (!ids.size) return [];
    const targets = await chrome.debugger.getTargets();
    const out = [];
    for (const t of targets) {
      if (t.type !== 'page' || !ids.has(t.tabId)) continue;
      const item = { tabId: t.tabId, targetId: t.id, url: t.url || '', title: t.title || '' };
      if (created.has(t.tabId)) item.owner = created.get(t.tabId);
      out.push(item);
    }
    return out;
  }

  async function reconcile() {
    // Drop attachments of tabs that are no longer exposed, then tell the daemon the current list.
    const ids = await exposedTabIds();
    for (const tabId of [...holders.keys()]) {
      if (!ids.has(tabId)) await release(tabId, true);
    }
    await announce();
  }

  async function announce(force = false) {
    if (!isOpen()) return;
    let targets;
    try { targets = await targetList(); } catch (e) { log('warn', `cdp: listing targets failed: ${e}`); return; }
    const text = JSON.stringify(targets);
    if (!force && text === lastAnnounced) return;
    lastAnnounced = text;
    notify('targets', { targets });
  }

  let announceTimer = null;
  function announceSoon() {
    if (announceTimer) return;
    announceTimer = setTimeout(() => { announceTimer = null; reconcile().catch(() => {}); }, 50);
  }

  // ---------------------------------------------------------------- attachments
  async function hold(tabId) {
    if (!(await isExposed(tabId))) throw cdpError('Gasoline: this tab is not exposed to CDP clients (track it and enable the AI Web Pilot)');
    const count = holders.get(tabId) || 0;
    if (count === 0) {
      // One attachment per tab, shared with the agent's input session (lib/debuggee.js).
      try { await attachTab(tabId, 'relay'); } catch (e) { throw cdpError(String(e && e.message || e)); }
    }
    holders.set(tabId, count + 1);
    if (count === 0) saveAttached();
    return {};
  }

  async function release(tabId, all = false) {
    const count = holders.get(tabId) || 0;
    if (count <= 0) return {};
    if (count > 1 && !all) { holders.set(tabId, count - 1); return {}; }
    holders.delete(tabId);
    saveAttached();
    await detachTab(tabId, 'relay');
    return {};
  }

  // The tabs this link attached, kept in chrome.storage.session too: a restarted worker must still
  // release what its previous life attached (and only that: other attachments are not ours).
  const ATTACHED_KEY = 'gasolineCdpAttached';
  function saveAttached() {
    chrome.storage.session.set({ [ATTACHED_KEY]: [...holders.keys()] }).catch(() => {});
  }
  // The tabs clients created (and their owners) survive a worker restart the same way.
  const CREATED_KEY = 'gasolineCdpCreated';
  function saveCreated() {
    chrome.storage.session.set({ [CREATED_KEY]: [...created.entries()] }).catch(() => {});
  }
  const createdRestored = chrome.storage.session.get(CREATED_KEY).then((stored) => {
    const entries = Array.isArray(stored[CREATED_KEY]) ? stored[CREATED_KEY] : [];
    for (const [tabId, owner] of entries) {
      if (Number.isInteger(tabId) && !created.has(tabId)) created.set(tabId, String(owner));
    }
  }).catch(() => {});

  async function releaseEverything() {
    const stored = await chrome.storage.session.get(ATTACHED_KEY).catch(() => ({}));
    const tabs = new Set([...holders.keys(), ...(Array.isArray(stored[ATTACHED_KEY]) ? stored[ATTACHED_KEY] : [])]);
    holders.clear();
    saveAttached();
    for (const tabId of tabs) {
      await detachTab(tabId, 'relay');  // stays attached while the agent's session holds it
    }
  }

  chrome.debugger.onEvent.addListener((source, method, params) => {
    if (!Number.isInteger(source.tabId) || !holders.has(source.tabId)) return;
    const body = { tabId: source.tabId, method, params: params || {} };
    if (source.sessionId) body.sessionId = source.sessionId;
    notify('event', body);
  });

  chrome.debugger.onDetach.addListener((source, reason) => {
    const tabId = source.tabId;
    if (!Number.isInteger(tabId)) return;
    forgetTab(tabId);
    if (!holders.has(tabId) && reason !== 'canceled_by_user') return;  // not this link's attachment
    const tabs = reason === 'canceled_by_user' ? [...holders.keys()] : [tabId];
    for (const id of tabs) {
      holders.delete(id);
      notify('detached', { tabId: id, reason });
    }
    saveAttached();
    if (reason === 'canceled_by_user') {
      // The user closed the infobar: every attachment is gone; let go of the rest too.
      releaseEverything().catch(() => {});
      log('warn', 'cdp: the user canceled debugging; CDP clients were detached', 'cdp');
    } else if (reason === 'target_closed') {
      cooldown.add(tabId);
      announce().then(() => setTimeout(() => { cooldown.delete(tabId); announce(); }, REATTACH_COOLDOWN_MS));
    }
  });

  // ---------------------------------------------------------------- requests from the daemon
  function cdpError(message, code = -32000) {
    const e = new Error(message);
    e.cdp = { code, message };
    return e;
  }

  function asCdpError(e) {
    if (e && e.cdp) return e.cdp;
    const text = String((e && e.message) || e);
    try {
      const parsed = JSON.parse(text);
      if (parsed && typeof parsed.message === 'string') return { code: Number(parsed.code) || -32000, message: parsed.message };
    } catch (_) { /* plain text */ }
    return { code: -32000, message: text };
  }

  async function createTab(params) {
    const tab = await chrome.tabs.create({ url: params.url || 'about:blank', active: !params.background });
    created.set(tab.id, typeof params.owner === 'string' ? params.owner : '');
    saveCreated();
    let target = null;
    for (let i = 0; i < 50 && !target; i++) {
      target = (await chrome.debugger.getTargets()).find((t) => t.tabId === tab.id && t.type === 'page');
      if (!target) await new Promise((r) => setTimeout(r, 20));
    }
    if (!target) throw cdpError('Gasoline: the new tab has no debugging target');
    announceSoon();
    return { tabId: tab.id, targetId: target.id, url: target.url || params.url || '' };
  }

  async function handle(method, params) {
    const tabId = params && params.tabId;
    switch (method) {
      case 'send': {
        if (!holders.has(tabId)) throw cdpError('Gasoline: the tab is not attached');
        const target = params.sessionId ? { tabId, sessionId: params.sessionId } : { tabId };
        const result = await chrome.debugger.sendCommand(target, params.method, params.params || {});
        return result || {};
      }
      case 'attach': return hold(tabId);
      case 'detach': return release(tabId);
      case 'createTab': return createTab(params || {});
      case 'closeTab':
        if (!created.has(tabId)) throw cdpError('Gasoline: only tabs created by a CDP client can be closed');
        await release(tabId, true);
        await chrome.tabs.remove(tabId);
        return {};
      case 'activateTab':
        if (!(await isExposed(tabId))) throw cdpError('Gasoline: this tab is not exposed to CDP clients');
        await chrome.tabs.update(tabId, { active: true });
        return {};
      default:
        throw cdpError(`Gasoline: unknown request ${method}`, -32601);
    }
  }

  function onMessage(data) {
    let msg;
    try { msg = JSON.parse(data); } catch (_) { return; }
    if (!msg || typeof msg !== 'object') return;
    if (msg.id !== undefined && typeof msg.method === 'string') {
      const socket = ws;
      handle(msg.method, msg.params || {}).then(
        (result) => { if (ws === socket) rawSend({ id: msg.id, result }); },
        (e) => { if (ws === socket) rawSend({ id: msg.id, error: asCdpError(e) }); },
      );
    } else if (msg.method === 'clients') {
      clients.count = Number(msg.params && msg.params.count) || 0;
      clients.ids = Array.isArray(msg.params && msg.params.ids) ? msg.params.ids.map(String) : [];
    }
  }

  // ---------------------------------------------------------------- the WebSocket
  function isOpen() { return ws !== null && verified && ws.readyState === WebSocket.OPEN; }

  function rawSend(message) {
    if (!isOpen()) return;
    try { ws.send(JSON.stringify(message)); } catch (e) { log('warn', `cdp: send failed: ${e}`, 'cdp'); }
  }

  function notify(method, params) { rawSend({ method, params }); }

  function browserInfo() {
    const ua = navigator.userAgent;
    const m = /(?:Headless)?Chrome\/([\d.]+)/.exec(ua);
    return { product: `Chrome/${m ? m[1] : '0.0.0.0'}`, userAgent: ua, version: chrome.runtime.getManifest().version };
  }

  function scheduleReconnect() {
    if (reconnectTimer) return;
    const delay = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
    attempt += 1;
    reconnectTimer = setTimeout(() => { reconnectTimer = null; connect(); }, delay);
  }

  async function connect() {
    const s = await loadSettings();
    const url = s.serverUrl.replace(/^http/, 'ws') + '/extension/cdp';
    if (ws && wsUrl === url && ws.readyState <= WebSocket.OPEN) return;
    if (ws) { const old = ws; ws = null; verified = false; try { old.close(1000); } catch (_) { /* closed */ } }
    wsUrl = url;
    let session;
    try {
      session = await pairing.ensureSession();
    } catch (e) {
      if (e instanceof NotPaired) log('info', `cdp: not connecting: ${e.message}`, 'cdp');
      wsUrl = '';
      scheduleReconnect();
      return;
    }
    const nonce = b64u(crypto.getRandomValues(new Uint8Array(24)));
    let socket;
    try {
      // The extension proves it holds the session key too: the daemon binds the link to the
      // extension it pinned (a copy of the extension with another key cannot take the link).
      const proof = await pairing.linkProof(session, nonce);
      socket = new WebSocket(`${url}?session=${encodeURIComponent(session.id)}&nonce=${nonce}&proof=${proof}`);
    } catch (e) { wsUrl = ''; scheduleReconnect(); return; }
    ws = socket;
    verified = false;
    socket.onopen = () => { /* nothing is sent before the daemon's proof (onmessage) */ };
    const start = async () => {
      attempt = 0;
      await releaseEverything();  // the daemon dropped the previous link's sessions
      lastAnnounced = '';
      let targets = [];
      try { targets = await targetList(); } catch (_) { /* announced later */ }
      lastAnnounced = JSON.stringify(targets);
      notify('hello', { ...browserInfo(), targets });
      clearInterval(pingTimer);
      pingTimer = setInterval(() => notify('ping', {}), PING_MS);
    };
    socket.onmessage = async (ev) => {
      if (ws !== socket) return;
      if (verified) { onMessage(ev.data); return; }
      let msg = null;
      try { msg = JSON.parse(ev.data); } catch (_) { /* not a proof */ }
      const proof = msg && msg.method === 'Gasoline.proof' && msg.params ? msg.params.proof : null;
      const ok = typeof proof === 'string' && await pairing.verifyAnswer(session, nonce, LINK_BODY, proof);
      if (ws !== socket) return;
      if (!ok) {
        log('warn', 'cdp: the server on the daemon port did not prove the paired identity; link closed', 'cdp');
        pairing.reset();
        try { socket.close(1008); } catch (_) { /* closed */ }
        return;
      }
      verified = true;
      await start();
    };
    socket.onclose = () => {
      if (ws !== socket) return;
      ws = null;
      verified = false;
      wsUrl = '';
      clearInterval(pingTimer);
      clients.count = 0;
      clients.ids = [];
      releaseEverything().catch(() => {});  // no orphaned attachment, no lingering infobar
      scheduleReconnect();
    };
    socket.onerror = () => { /* onclose follows */ };
  }

  // ---------------------------------------------------------------- browser and settings changes
  chrome.tabs.onRemoved.addListener((tabId) => {
    holders.delete(tabId);
    if (created.delete(tabId)) saveCreated();
    announceSoon();
  });
  chrome.tabs.onCreated.addListener(() => announceSoon());
  chrome.tabs.onUpdated.addListener((tabId, info) => {
    if (info.url !== undefined || info.title !== undefined || info.status === 'complete') announceSoon();
  });
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area !== 'local') return;
    // The worker's settings cache reloads on the same event; read them after it.
    setTimeout(() => {
      if ('serverUrl' in changes) connect();
      announceSoon();
    }, 0);
  });

  chrome.runtime.onMessage.addListener((msg, sender, sendResponse) => {
    if (!msg || (msg.type !== 'gasoline:cdp-status' && msg.type !== 'gasoline:cdp-disconnect')) return false;
    if (!sender.url || !sender.url.startsWith(chrome.runtime.getURL(''))) return false;
    if (msg.type === 'gasoline:cdp-disconnect') notify('disconnectClients', {});
    sendResponse({ connected: isOpen(), clients: clients.count, clientIds: clients.ids, attachedTabs: [...holders.keys()] });
    return false;
  });

  connect();
  return {
    status: () => ({ connected: isOpen(), clients: clients.count, attachedTabs: [...holders.keys()] }),
    reconnect: () => { if (ws) ws.close(); else connect(); },
  };
}
