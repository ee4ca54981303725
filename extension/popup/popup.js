// Gasoline popup: connection state, the daemon's entry count, tracked tabs, tracking and pilot toggles.
import { STORAGE_KEYS, settingsFromStorage, isTrackedTab } from '../lib/settings.js';

const $ = (id) => document.getElementById(id);
let currentTab = null;

async function render() {
  const raw = await chrome.storage.local.get(null);
  const s = settingsFromStorage(raw);
  const status = await chrome.runtime.sendMessage({ type: 'gasoline:status' }).catch(() => null);

  const state = $('state');
  if (!status) { state.textContent = 'starting…'; state.className = 'state unknown'; }
  else if (status.connected) { state.textContent = 'connected'; state.className = 'state connected'; }
  else { state.textContent = 'disconnected'; state.className = 'state disconnected'; }
  $('server').textContent = s.serverUrl;
  $('entries').textContent = status && typeof status.entries === 'number' ? String(status.entries) : '–';
  $('ai-controlled').hidden = !(status && status.ai_controlled);
  $('dropped-row').hidden = !(status && status.dropped);
  $('dropped').textContent = status ? String(status.dropped) : '0';
  const err = $('error-row');
  err.hidden = !(status && !status.connected && status.last_error);
  err.textContent = status && status.last_error ? `Last error: ${status.last_error}` : '';
  $('version').textContent = `v${chrome.runtime.getManifest().version}`;
  // CDP clients attached through the daemon's relay (lib/cdp.js), with a way to cut them off.
  const cdp = await chrome.runtime.sendMessage({ type: 'gasoline:cdp-status' }).catch(() => null);
  $('cdp-row').hidden = !(cdp && cdp.connected);
  $('cdp-clients').textContent = cdp ? String(cdp.clients) : '0';
  $('cdp-disconnect').hidden = !(cdp && cdp.clients > 0);

  renderPairing(status);
  $('pilot').checked = s.pilotEnabled;
  $('agents-track').checked = s.agentsMayTrack;
  $('track-all').checked = s.trackAllTabs;

  const trackedHere = currentTab && isTrackedTab(s, currentTab.id, false);
  const btn = $('track-current');
  btn.textContent = trackedHere ? 'Stop tracking this tab' : 'Track this tab';
  btn.disabled = !currentTab || !/^(https?|file):/.test(currentTab.url || '');
  btn.dataset.tracked = trackedHere ? '1' : '';
  const loadedBefore = await chrome.storage.session.get('gasolineLoadedBeforeTracking').catch(() => ({}));
  $('reload-row').hidden = !(trackedHere && (loadedBefore.gasolineLoadedBeforeTracking || []).includes(currentTab.id));

  // Build the whole list first, then swap it in: renders overlap (a 2 s timer, storage changes) and
  // an emptied list waiting on chrome.tabs.get would flicker, or end up with an entry twice.
  const ids = [s.trackedTabId, ...s.extraTabs].filter(Boolean);
  const items = [];
  if (!ids.length) {
    const li = document.createElement('li');
    li.className = 'muted';
    li.textContent = s.trackAllTabs ? 'every tab' : 'none';
    items.push(li);
  }
  const tabs = await Promise.all(ids.map((id) => chrome.tabs.get(id).catch(() => null)));
  ids.forEach((id, i) => {
    const tab = tabs[i];
    const li = document.createElement('li');
    li.textContent = tab ? `${tab.title || tab.url} ` : `tab ${id} `;
    if (id === s.trackedTabId) li.title = 'primary tracked tab';
    const un = document.createElement('button');
    un.textContent = 'untrack';
    un.addEventListener('click', async () => { await chrome.runtime.sendMessage({ type: 'gasoline:track', tabId: id, tracked: false }); render(); });
    li.appendChild(un);
    items.push(li);
  });
  $('tracked').replaceChildren(...items);
}

// Pairing (lib/pairing.js): the first time, the user compares the fingerprint the daemon offers with
// what `gasoline identity` prints, and pins it; a daemon that cannot prove that identity later is
// refused, and this says why.
let offeredFingerprint = '';
function renderPairing(status) {
  const p = status && status.pairing;
  const box = $('pairing');
  box.hidden = !p;
  if (!p) return;
  box.dataset.state = p.state;
  offeredFingerprint = p.offered_fingerprint || '';
  const text = $('pairing-text');
  $('pair').hidden = !(p.state === 'unpaired' && offeredFingerprint);
  $('paired-row').hidden = !p.fingerprint;
  $('paired-fp').textContent = p.fingerprint || '';
  // This extension's own key: the daemon pins it (`gasoline status` prints the one it pinned).
  $('extension-row').hidden = !p.extension_fingerprint;
  $('extension-fp').textContent = p.extension_fingerprint || '';
  if (p.state === 'unpaired' && offeredFingerprint) {
    text.textContent = `Not paired. The daemon offers identity ${offeredFingerprint}. Pair only if \`gasoline identity\` prints the same; until then nothing is captured and no command runs.`;
    text.className = 'warn';
  } else if (p.state === 'mismatch' || p.state === 'unsupported' || p.state === 'refused') {
    text.textContent = p.message;
    text.className = 'error';
  } else if (p.state === 'paired') {
    text.textContent = 'verified: the daemon proved its identity, and knows this extension';
    text.className = 'ok';
  } else {
    text.textContent = p.message || '';
    text.className = 'muted';
  }
}
$('pair').addEventListener('click', async () => {
  const answer = await chrome.runtime.sendMessage({ type: 'gasoline:pair', fingerprint: offeredFingerprint }).catch((e) => ({ ok: false, error: String(e) }));
  if (!answer || !answer.ok) $('pairing-text').textContent = `Pairing failed: ${answer ? answer.error : 'no answer'}`;
  render();
});
$('unpair').addEventListener('click', async () => { await chrome.runtime.sendMessage({ type: 'gasoline:unpair' }); render(); });
$('agents-track').addEventListener('change', (e) => chrome.storage.local.set({ [STORAGE_KEYS.agentsMayTrack]: e.target.checked }));

$('track-current').addEventListener('click', async () => {
  if (!currentTab) return;
  const tracked = !$('track-current').dataset.tracked;
  await chrome.runtime.sendMessage({ type: 'gasoline:track', tabId: currentTab.id, tracked });
  render();
});
$('reload-current').addEventListener('click', async () => {
  if (currentTab) await chrome.tabs.reload(currentTab.id);
  render();
});
$('pilot').addEventListener('change', (e) => chrome.storage.local.set({ [STORAGE_KEYS.pilotEnabled]: e.target.checked }));
$('track-all').addEventListener('change', (e) => chrome.storage.local.set({ [STORAGE_KEYS.trackAllTabs]: e.target.checked }));
$('cdp-disconnect').addEventListener('click', async () => {
  await chrome.runtime.sendMessage({ type: 'gasoline:cdp-disconnect' }).catch(() => null);
  setTimeout(render, 200);
});
$('options').addEventListener('click', (e) => { e.preventDefault(); chrome.runtime.openOptionsPage(); });
chrome.storage.onChanged.addListener(() => render());

(async () => {
  [currentTab] = await chrome.tabs.query({ active: true, currentWindow: true });
  await render();
  setInterval(render, 2000);
})();
