// Gasoline — the page hooks: the only code of ours in a page while it loads (MAIN world, document_start).
//
// Wraps console, fetch, XMLHttpRequest, WebSocket and history before the page's scripts run and
// keeps raw records of what passes. It does nothing else: content/capture.js, which the worker
// injects into a tracked page once it has loaded, turns records into items; an untracked page gets
// its own functions back at its verdict. Every page parses this file on its load path, so it stays
// small; docs/extension.md explains the design.
(() => {
  'use strict';
  if (window.__gasolineHooks) return;
  const RAW_LIMIT = 1000; // records kept until the capture module takes them (newest kept, counted)
  const NO_VERDICT_MS = 5000; // after the load: no verdict means nobody is listening

  let tracked = null; // null until the worker's verdict
  const capture = { logs: true, network: true, websocket: true, actions: true };
  let raw = [];
  let lost = 0;
  let module = null; // content/capture.js, once attached
  let sink = null; // its receive(), while tracked

  // A fetch record holds a clone of the response; a dropped one releases its body.
  const discard = (records) => {
    for (const r of records) {
      if (r[0] === 'fetch' && r[7]) r[7].body.cancel().catch(() => {});
    }
  };
  const note = (record) => {
    if (sink) { sink(record); return; }
    raw.push(record);
    if (raw.length >= 2 * RAW_LIMIT) { // trimmed in bulk: a logging loop stays O(1) per call
      discard(raw.slice(0, raw.length - RAW_LIMIT));
      lost += raw.length - RAW_LIMIT;
      raw = raw.slice(-RAW_LIMIT);
    }
  };

  // Every wrapper, so an untracked page gets the page's own functions back (and a page tracked
  // later gets them again). A function the page replaced after us is left alone.
  const hooks = [];
  const hook = (target, name, wrapper) => {
    hooks.push({ target, name, original: target[name], wrapper });
    target[name] = wrapper;
  };
  const setHooks = (on) => {
    for (const h of hooks) {
      const current = h.target[h.name];
      if (on && current === h.original) h.target[h.name] = h.wrapper;
      else if (!on && current === h.wrapper) h.target[h.name] = h.original;
    }
  };
  const untrack = () => {
    tracked = false;
    setHooks(false);
    discard(raw);
    raw = [];
    lost = 0;
    sink = null;
    if (module) module.stop();
  };

  // ---------------------------------------------------------------- the worker's handle
  // lib/pages.js calls track() once the page has loaded and take() to pull; capture.js attaches
  // itself. The page can call these too: all it can reach is its own capture.
  const track = (on, flags) => {
    if (flags && typeof flags === 'object') {
      for (const key of Object.keys(capture)) {
        if (typeof flags[key] === 'boolean') capture[key] = flags[key];
      }
    }
    if (!on) { untrack(); return { items: [], dropped: 0 }; }
    tracked = true;
    setHooks(true);
    if (!module) return { items: [], dropped: 0, attach: true }; // the worker injects capture.js
    if (sink) return module.take(false);
    const records = raw;
    const missed = lost;
    raw = [];
    lost = 0;
    sink = module.receive;
    return module.start(records, missed);
  };
  const take = (final) => (module && sink ? module.take(final) : { items: [], dropped: 0 });
  const attach = (m) => {
    if (module || !m || typeof m.receive !== 'function') return null;
    module = m;
    return { capture, tracked: () => tracked };
  };
  Object.defineProperty(window, '__gasolineHooks', {
    value: Object.freeze({ version: 2, track, take, attach }),
    enumerable: false, writable: false, configurable: false,
  });

  const afterLoad = () => setTimeout(() => { if (tracked === null) untrack(); }, NO_VERDICT_MS);
  if (document.readyState === 'complete') afterLoad();
  else window.addEventListener('load', afterLoad, { once: true });

  // ---------------------------------------------------------------- console and errors
  // A call keeps its arguments and an Error for the caller's stack (formatted lazily by V8).
  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    const original = console[level];
    if (typeof original !== 'function') continue;
    hook(console, level, function (...args) {
      if (tracked !== false && capture.logs) {
        try { note(['console', level, args, new Error(), Date.now(), location.href]); } catch (_) { /* never break the page */ }
      }
      return original.apply(this, args);
    });
  }
  window.addEventListener('error', (event) => {
    if (tracked !== false && (event.target === window || !event.target || !event.target.tagName)) { // not a resource's load error
      note(['error', event, Date.now(), location.href]);
    }
  }, true);
  window.addEventListener('unhandledrejection', (event) => {
    if (tracked !== false) note(['rejection', event, Date.now(), location.href]);
  });

  // ---------------------------------------------------------------- fetch and XMLHttpRequest
  const originalFetch = window.fetch;
  if (typeof originalFetch === 'function') {
    hook(window, 'fetch', function (input, init) {
      if (tracked === false || !capture.network) return originalFetch.apply(this, arguments);
      const started = performance.now();
      let requestBody = null; // a body inside a Request is consumed by fetch: read a copy
      try {
        if (input instanceof Request && !(init && init.body !== undefined) && !/^(?:GET|HEAD)$/i.test(input.method) && !input.bodyUsed) {
          requestBody = input.clone().text().catch(() => undefined);
        }
      } catch (_) { /* keep going without the body */ }
      const promise = originalFetch.apply(this, arguments);
      const href = location.href;
      promise.then((response) => {
        if (tracked === false) return;
        let copy = null; // before the page's own then() can consume the body
        try { if (response.type !== 'opaque' && response.body && !response.bodyUsed) copy = response.clone(); } catch (_) { /* no body then */ }
        note(['fetch', input, init, started, performance.now(), requestBody, response, copy, null, href]);
      }, (error) => {
        if (tracked !== false) note(['fetch', input, init, started, performance.now(), requestBody, null, null, error, href]);
      });
      return promise;
    });
  }

  const XHR = window.XMLHttpRequest;
  if (XHR) {
    const requests = new WeakMap();
    const { open, send, setRequestHeader } = XHR.prototype;
    hook(XHR.prototype, 'open', function (method, url) {
      if (tracked !== false && capture.network) requests.set(this, { method, url, base: location.href, headers: [] });
      else requests.delete(this);
      return open.apply(this, arguments);
    });
    hook(XHR.prototype, 'setRequestHeader', function (name, value) {
      const info = requests.get(this);
      if (info) info.headers.push([name, value]);
      return setRequestHeader.apply(this, arguments);
    });
    hook(XHR.prototype, 'send', function (body) {
      const info = requests.get(this);
      if (info && tracked !== false) {
        info.body = body;
        info.started = performance.now();
        this.addEventListener('loadend', () => {
          if (tracked !== false) note(['xhr', this, info, performance.now()]);
        }, { once: true });
      }
      return send.apply(this, arguments);
    });
  }

  // ---------------------------------------------------------------- WebSocket
  const NativeWebSocket = window.WebSocket;
  if (typeof NativeWebSocket === 'function') {
    let counter = 0;
    const ids = new WeakMap();
    class GasolineWebSocket extends NativeWebSocket {
      constructor(url, protocols) {
        super(url, protocols);
        if (tracked === false || !capture.websocket) return;
        const id = 'ws-' + Date.now().toString(36) + '-' + (++counter);
        ids.set(this, id);
        const wsUrl = this.url;
        const on = (type, detail) => this.addEventListener(type, (e) => {
          if (tracked !== false) note(['ws', Date.now(), id, wsUrl, type, detail(e)]);
        });
        on('open', () => this.protocol);
        on('message', (e) => e.data);
        on('close', (e) => e);
        on('error', () => null);
      }
      send(data) {
        const id = ids.get(this);
        if (id && tracked !== false) note(['ws', Date.now(), id, this.url, 'send', data]);
        return super.send(data);
      }
    }
    Object.defineProperty(GasolineWebSocket, 'name', { value: 'WebSocket' });
    hook(window, 'WebSocket', GasolineWebSocket);
  }

  // ---------------------------------------------------------------- SPA navigations
  for (const fn of ['pushState', 'replaceState']) {
    const original = history[fn];
    hook(history, fn, function () {
      const from = location.href;
      const result = original.apply(this, arguments);
      if (tracked !== false && from !== location.href) note(['navigate', Date.now(), from, location.href]);
      return result;
    });
  }
})();
//# sourceURL=gasoline-page-hooks.js
