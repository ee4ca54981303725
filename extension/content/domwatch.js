// Gasoline — dom_change: the agents' DOM watches in one tracked tab (docs/streaming.md, "DOM
// changes").
//
// Injected on demand into the tab's isolated world (worker/domwatch.js), after selectors.js and
// commands.js, whose resolver it uses (CSS and the semantic forms text=, role=, label=, ... that
// the tools accept). One MutationObserver per tab watches the whole document; mutations are
// coalesced (one evaluation at most every COALESCE_MS, and one per animation-free timer turn) and
// each watch is evaluated once per evaluation, whatever the number of mutations. A watch reports
// when its condition becomes true: `appears` (no match -> a match), `disappears` (a match -> none),
// `text_matches` (no matching element's text contains `text` -> one does). Bounded: at most
// MAX_WATCHES watches, MAX_REPORTS_PER_SECOND reports a second per tab (the rest are dropped and
// counted in the next report), texts cut at TEXT_LIMIT characters. Reports go to the worker
// (chrome.runtime.sendMessage), which POSTs them to the daemon's /dom-changes.
(() => {
  'use strict';
  if (globalThis.__gasolineDomWatch) return;

  const COALESCE_MS = 25;
  const MAX_WATCHES = 50;
  const MAX_REPORTS_PER_SECOND = 20;
  const TEXT_LIMIT = 200;
  const MAX_MATCHES_SCANNED = 200;

  let watches = [];        // [{id, selector, condition, text?}]
  let state = new Map();   // id -> last verdict (true/false), undefined before the first look
  let observer = null;
  let timer = null;
  let windowStart = 0;
  let windowCount = 0;
  let dropped = 0;

  const clip = (s) => {
    s = String(s == null ? '' : s).replace(/\s+/g, ' ').trim();
    return s.length > TEXT_LIMIT ? s.slice(0, TEXT_LIMIT) + '…' : s;
  };

  const find = (selector) => {
    const api = globalThis.__gasolineCommands;
    try {
      return api && api.resolve ? api.resolve(selector) : Array.from(document.querySelectorAll(selector));
    } catch (_) {
      return [];
    }
  };

  // The verdict of one watch now, and what a report says about it.
  const look = (w) => {
    const found = find(w.selector);
    if (w.condition === 'text_matches') {
      const limit = Math.min(found.length, MAX_MATCHES_SCANNED);
      for (let i = 0; i < limit; i += 1) {
        const text = found[i].textContent || '';
        if (text.includes(w.text)) return { yes: true, text: clip(text), count: found.length };
      }
      return { yes: false, count: found.length };
    }
    const present = found.length > 0;
    const yes = w.condition === 'disappears' ? !present : present;
    return { yes, text: present ? clip(found[0].textContent) : '', count: found.length };
  };

  const evaluate = () => {
    timer = null;
    const changes = [];
    const now = Date.now();
    for (const w of watches) {
      const verdict = look(w);
      const before = state.get(w.id);
      state.set(w.id, verdict.yes);
      // The first look sets the baseline: only a change from there is reported.
      if (before === false && verdict.yes) {
        changes.push({ watch: w.id, condition: w.condition, text: verdict.text || undefined, count: verdict.count, ts: new Date(now).toISOString() });
      }
    }
    if (!changes.length) return;
    if (now - windowStart >= 1000) { windowStart = now; windowCount = 0; }
    const room = Math.max(0, MAX_REPORTS_PER_SECOND - windowCount);
    const sent = changes.slice(0, room);
    dropped += changes.length - sent.length;
    windowCount += sent.length;
    if (!sent.length) return;
    const report = { type: 'gasoline:dom_change', changes: sent };
    if (dropped) { report.dropped = dropped; dropped = 0; }
    try { chrome.runtime.sendMessage(report).catch(() => {}); } catch (_) { /* the extension reloaded */ }
  };

  const schedule = () => {
    if (timer === null) timer = setTimeout(evaluate, COALESCE_MS);
  };

  const set = (list) => {
    const next = (Array.isArray(list) ? list : []).slice(0, MAX_WATCHES)
      .filter((w) => w && typeof w.id === 'string' && typeof w.selector === 'string');
    const keep = new Map();
    for (const w of next) if (state.has(w.id)) keep.set(w.id, state.get(w.id));
    watches = next;
    state = keep;
    // The baseline of a new watch is taken now (an element already there has not "appeared").
    for (const w of watches) if (!state.has(w.id)) state.set(w.id, look(w).yes);
    if (!watches.length) {
      if (observer) { observer.disconnect(); observer = null; }
      if (timer !== null) { clearTimeout(timer); timer = null; }
      return { watching: 0 };
    }
    if (!observer) {
      observer = new MutationObserver(schedule);
      observer.observe(document.documentElement || document, { childList: true, subtree: true, attributes: true, characterData: true });
    }
    return { watching: watches.length };
  };

  Object.defineProperty(globalThis, '__gasolineDomWatch', { value: Object.freeze({ set }), configurable: false });
})();
