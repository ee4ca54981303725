// Gasoline — draw-mode annotations: the overlay's sink, and the worker's store of what the user
// drew (chrome.storage.session). The service worker (background.js) calls `initAnnotations` to
// wire it to the worker's settings, its in-tab runner and its log; worker/commands.js and
// worker/messages.js read and clear the store.

import { targetTab } from './policy.js';

let loadSettings = null;
let inTab = null;
let extLog = () => {};

export function initAnnotations(deps) {
  ({ loadSettings, inTab, extLog } = deps);
}

// The overlay (commands.js, isolated world) hands each finished annotation to a sink this worker
// installs in the same world; the sink messages the worker, which keeps them in
// chrome.storage.session (they survive worker restarts and navigations, not a browser restart).
const ANNOTATIONS_KEY = 'gasolineAnnotations';
const MAX_ANNOTATIONS = 200;
let annotationWrites = Promise.resolve();

async function readAnnotations() {
  const raw = (await chrome.storage.session.get(ANNOTATIONS_KEY))[ANNOTATIONS_KEY];
  return Array.isArray(raw) ? raw : [];
}

export function storeAnnotation(annotation, tab) {
  annotationWrites = annotationWrites.then(async () => {
    const list = await readAnnotations();
    list.push(Object.assign({}, annotation, { tab_id: tab.id }));
    if (list.length > MAX_ANNOTATIONS) list.splice(0, list.length - MAX_ANNOTATIONS);
    await chrome.storage.session.set({ [ANNOTATIONS_KEY]: list });
  }).catch((e) => extLog('warn', `could not keep an annotation: ${e}`, 'annotations'));
  return annotationWrites;
}

export async function drawMode(cmd) {
  const tab = await targetTab(cmd);
  await chrome.scripting.executeScript({
    target: { tabId: tab.id },
    func: () => {
      globalThis.__gasolineAnnotationSink = (annotation) => chrome.runtime.sendMessage({ type: 'gasoline:annotation', annotation }).catch(() => {});
      return true;
    },
  });
  const result = await inTab(tab.id, 'draw_mode', cmd.params || {});
  return Object.assign({ tab_id: tab.id, url: tab.url }, result);
}

const annotationSummary = (a) => ({
  id: a.id, note: a.note, rect: a.rect, url: a.url, title: a.title, timestamp: a.timestamp, tab_id: a.tab_id,
  element: a.element ? { tag: a.element.tag, selectors: a.element.selectors, text: a.element.text } : null,
});

export async function listAnnotations(params) {
  await annotationWrites;
  let list = await readAnnotations();
  if (params.tab_id) list = list.filter((a) => a.tab_id === Number(params.tab_id));
  const limit = Math.max(1, Math.min(Number(params.limit) || 100, 1000));
  const s = await loadSettings();
  let active = null;
  if (s.trackedTabId) {
    active = await chrome.scripting.executeScript({ target: { tabId: s.trackedTabId }, func: () => !!document.querySelector('[data-gasoline-overlay=draw]') })
      .then(([r]) => r.result, () => null);
  }
  return { total: list.length, annotations: list.slice(-limit).map(annotationSummary), draw_mode_active: active };
}

export async function annotationDetail(params) {
  await annotationWrites;
  const found = (await readAnnotations()).find((a) => a.id === params.annotation_id);
  if (!found) return { error: 'not_found', message: `no annotation ${params.annotation_id} (list them with analyze annotations)` };
  return { annotation: found };
}

