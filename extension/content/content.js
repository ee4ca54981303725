// Gasoline — isolated-world content script.
//
// 1. Asks the service worker whether this tab is tracked (only the worker knows the tab id) and
//    tells the page hooks (inject.js); asks again whenever chrome.storage changes, so tracking a
//    tab or untracking it takes effect without a reload.
// 2. Relays what the page hooks capture to the service worker in small batches.
// 3. Records user actions (click, input, select, keypress, navigate, scroll) with several selector
//    strategies; password values are never sent.
(() => {
  'use strict';
  if (globalThis.__gasolineContent) return;
  globalThis.__gasolineContent = true;

  const PAGE_TAG = '__gasoline_page__';
  let tracked = false;
  let captureActions = true;
  let batch = [];
  let flushTimer = null;

  const runtimeAlive = () => {
    try { return !!chrome.runtime && !!chrome.runtime.id; } catch (_) { return false; }
  };

  const flush = () => {
    flushTimer = null;
    if (!batch.length || !runtimeAlive()) { batch = []; return; }
    const items = batch;
    batch = [];
    chrome.runtime.sendMessage({ type: 'gasoline:capture', items }).catch(() => {});
  };

  const queue = (kind, payload) => {
    if (!tracked) return;
    batch.push({ kind, payload });
    if (batch.length >= 25) flush();
    else if (!flushTimer) flushTimer = setTimeout(flush, 200);
  };

  const tellPage = (capture) => {
    window.postMessage({ __gasoline_ext__: true, kind: 'tracking', tracked, capture }, '*');
  };

  const refreshTracking = async () => {
    if (!runtimeAlive()) return;
    try {
      const answer = await chrome.runtime.sendMessage({ type: 'gasoline:hello', url: location.href });
      tracked = !!(answer && answer.tracked);
      captureActions = !answer || !answer.capture || answer.capture.actions !== false;
      tellPage(answer && answer.capture);
      if (tracked && !navigationSent) {
        navigationSent = true;
        queue('action', { type: 'navigate', timestamp: Date.now(), url: location.href, from_url: document.referrer || '', to_url: location.href });
      }
    } catch (_) {
      // The worker is starting up; try again shortly.
      setTimeout(refreshTracking, 500);
    }
  };

  let navigationSent = false;
  // The storage keys that decide what this tab captures (lib/settings.js STORAGE_KEYS). The worker
  // rewrites trackedTabUrl / trackedTabTitle on every navigation of the tracked tab: asking again
  // then would cost every open tab a round trip to the worker while a page is loading.
  const TRACKING_KEYS = ['trackedTabId', 'gasolineTrackedTabs', 'gasolineTrackAllTabs', 'gasolineCaptureLogs',
    'gasolineCaptureNetwork', 'gasolineCaptureWebSocket', 'gasolineCaptureActions'];
  chrome.storage.onChanged.addListener((changes, area) => {
    if (area === 'local' && TRACKING_KEYS.some((k) => k in changes)) refreshTracking();
  });
  chrome.runtime.onMessage.addListener((msg) => {
    if (msg && msg.type === 'gasoline:tracking-changed') refreshTracking();
  });
  refreshTracking();

  window.addEventListener('message', (event) => {
    if (event.source !== window || !event.data || event.data[PAGE_TAG] !== true || !Array.isArray(event.data.items)) return;
    for (const item of event.data.items) {
      const { kind, payload } = item || {};
      if (!payload || typeof payload !== 'object') continue;
      if (kind === 'nav') {
        queue('action', { type: 'navigate', timestamp: Date.now(), url: payload.to_url, from_url: payload.from_url, to_url: payload.to_url });
      } else if (kind === 'log' || kind === 'network_body' || kind === 'ws' || kind === 'perf') {
        queue(kind, payload);
      }
    }
  });

  // ---------------------------------------------------------------- user actions
  // commands.js (loaded just before this file) holds the selector logic; if it is missing (e.g. a
  // page that replaced its globals before we ran), fall back to the basic selectors.
  const selectorsFor = (el) => {
    if (globalThis.__gasolineCommands) return globalThis.__gasolineCommands.selectorsFor(el);
    const out = { tag: el.tagName.toLowerCase() };
    if (el.id) out.css = '#' + el.id;
    const testId = el.getAttribute('data-testid');
    if (testId) out.testId = testId;
    const aria = el.getAttribute('aria-label');
    if (aria) out.ariaLabel = aria;
    return out;
  };

  const isPassword = (el) => el && el.tagName === 'INPUT' && (el.type === 'password' || /password|passwd|secret|otp|cc-number|cc-csc/i.test(el.autocomplete || ''));

  // Events fired by an agent's dom_action (commands.js) are not user actions.
  const agentActing = () => (globalThis.__gasolineAgentActing || 0) > 0;

  const record = (action) => {
    if (!tracked || !captureActions) return;
    action.timestamp = Date.now();
    action.url = location.href;
    queue('action', action);
  };

  document.addEventListener('click', (e) => {
    if (agentActing()) return;
    const el = e.target instanceof Element ? e.target : null;
    if (!el) return;
    record({ type: 'click', selectors: selectorsFor(el), x: Math.round(e.clientX), y: Math.round(e.clientY) });
  }, true);

  const inputTimers = new WeakMap();
  document.addEventListener('input', (e) => {
    if (agentActing()) return;
    const el = e.target;
    if (!(el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement || (el instanceof HTMLElement && el.isContentEditable))) return;
    if (el instanceof HTMLInputElement && (el.type === 'checkbox' || el.type === 'radio')) return;
    clearTimeout(inputTimers.get(el));
    inputTimers.set(el, setTimeout(() => {
      const value = isPassword(el) ? '[redacted]' : String(el.value !== undefined ? el.value : el.textContent || '').slice(0, 500);
      record({ type: 'input', selectors: selectorsFor(el), value, input_type: el.type || 'text' });
    }, 400));
  }, true);

  document.addEventListener('change', (e) => {
    if (agentActing()) return;
    const el = e.target;
    if (el instanceof HTMLSelectElement) {
      const opt = el.selectedOptions && el.selectedOptions[0];
      record({ type: 'select', selectors: selectorsFor(el), value: el.value, text: opt ? opt.text : '' });
    } else if (el instanceof HTMLInputElement && (el.type === 'checkbox' || el.type === 'radio')) {
      record({ type: 'input', selectors: selectorsFor(el), value: String(el.checked), input_type: el.type });
    }
  }, true);

  const SPECIAL_KEYS = new Set(['Enter', 'Escape', 'Tab', 'Backspace', 'Delete', 'ArrowUp', 'ArrowDown', 'ArrowLeft', 'ArrowRight', 'PageUp', 'PageDown', 'Home', 'End']);
  document.addEventListener('keydown', (e) => {
    if (agentActing()) return;
    if (!SPECIAL_KEYS.has(e.key) && !(e.ctrlKey || e.metaKey || e.altKey)) return;
    const el = e.target instanceof Element ? e.target : null;
    // A modified printable key in a password field would reveal a character; record only the modifier.
    const key = isPassword(el) && e.key.length === 1 ? '[redacted]' : e.key;
    record({ type: 'keypress', key, modifiers: { ctrl: e.ctrlKey, meta: e.metaKey, alt: e.altKey, shift: e.shiftKey }, selectors: el ? selectorsFor(el) : undefined });
  }, true);

  let scrollTimer = null;
  window.addEventListener('scroll', () => {
    if (scrollTimer || agentActing()) return;
    scrollTimer = setTimeout(() => {
      scrollTimer = null;
      record({ type: 'scroll', scroll_x: Math.round(window.scrollX), scroll_y: Math.round(window.scrollY) });
    }, 1000);
  }, { passive: true, capture: true });

  window.addEventListener('popstate', () => record({ type: 'navigate', to_url: location.href, trigger: 'popstate' }));
  window.addEventListener('hashchange', (e) => record({ type: 'navigate', from_url: e.oldURL, to_url: e.newURL, trigger: 'hashchange' }));
  window.addEventListener('pagehide', flush);
})();
