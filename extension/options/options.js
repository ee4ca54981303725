// Gasoline options: the daemon's port (default 7890) and what is captured.
import { STORAGE_KEYS, normalizeServerUrl, portOf, settingsFromStorage } from '../lib/settings.js';

const $ = (id) => document.getElementById(id);
const TOGGLES = {
  gasolineCaptureLogs: 'captureLogs', gasolineCaptureNetwork: 'captureNetwork',
  gasolineCaptureWebSocket: 'captureWebSocket', gasolineCaptureActions: 'captureActions',
  gasolineTrackAllTabs: 'trackAllTabs',
  gasolineAllowFileUrls: 'allowFileUrls',
};

function show(text, ok) {
  $('result').textContent = text;
  $('result').className = ok ? 'ok' : 'bad';
}

async function load() {
  const s = settingsFromStorage(await chrome.storage.local.get(null));
  $('port').value = String(portOf(s.serverUrl));
  for (const [key, field] of Object.entries(TOGGLES)) $(key).checked = s[field];
  document.body.dataset.ready = 'true';
}

$('save').addEventListener('click', async () => {
  try {
    const serverUrl = normalizeServerUrl($('port').value);
    await chrome.storage.local.set({ [STORAGE_KEYS.serverUrl]: serverUrl });
    show(`saved: ${serverUrl}`, true);
  } catch (e) {
    show(String(e.message || e), false);
  }
});

$('test').addEventListener('click', async () => {
  show('testing…', true);
  const answer = await chrome.runtime.sendMessage({ type: 'gasoline:health' }).catch(() => null);
  if (answer && answer.health && answer.health.status === 'ok') {
    const entries = answer.health.logs ? answer.health.logs.entries : '?';
    show(`connected to ${answer.health.name || 'gasoline'} ${answer.health.version || ''} (${entries} entries)`, true);
  } else {
    show('no Gasoline daemon answered on that port', false);
  }
});

for (const key of Object.keys(TOGGLES)) {
  $(key).addEventListener('change', (e) => chrome.storage.local.set({ [key]: e.target.checked }));
}
load();
