// Gasoline — page (MAIN world) capture.
//
// Runs at document_start in the page's own JavaScript world (after content/selectors.js) so it can
// wrap console, fetch, XMLHttpRequest and WebSocket before the page's scripts run, and observe
// errors, performance and the user's actions. It never talks to the network or to the extension:
// it keeps what it captures, and the service worker comes for it (window.__gasolineHooks, below)
// with chrome.scripting.executeScript. The worker's verdict comes once the page has loaded; until
// then items wait in a small bounded buffer, and when the tab is not tracked they are discarded and
// the page gets its own functions back.
//
// Cost on the page (bench/extension_overhead.py): the hooks sit on the page's own call paths, so
// they do as little as possible there. Once a tab is known not to be tracked every hook is a plain
// pass-through. Otherwise a console call only keeps its arguments and an Error object (whose stack
// text V8 formats lazily); serializing the arguments and finding the calling script happen later,
// when the main thread is idle (requestIdleCallback, at most 1 s later). An object that the page
// mutates right after logging it may therefore be captured in its later state, as DevTools' live
// object view shows it. fetch and XHR likewise do their bookkeeping after the response, not before
// the request.
(() => {
  'use strict';
  if (window.__gasolineHooks) return;
  // content/selectors.js ran just before this file in the same world; take its functions and take
  // the global away again, so the page neither sees nor replaces them.
  const selectors = window.__gasolineSelectors || null;
  try { delete window.__gasolineSelectors; } catch (_) { /* not configurable: leave it */ }

  // The name this script goes by in stack traces (the sourceURL comment at the end of the file).
  // Without it Chrome attributes every console call that passes through a hook to the extension
  // (its URL is chrome-extension://…) and files the page's own messages in the extension's error
  // console, at a cost of tens of microseconds per call.
  const SCRIPT_NAME = 'gasoline-page-hooks.js';
  const REQUEST_BODY_LIMIT = 8192;
  const RESPONSE_BODY_LIMIT = 16384;
  const WS_FRAME_LIMIT = 4096;
  const MESSAGE_LIMIT = 10000;
  const PENDING_LIMIT = 300;
  const OUTBOX_LIMIT = 5000; // items waiting for the worker's next pull (the oldest go first, counted)
  const TAKE_LIMIT = 1000;   // items handed over per pull
  const CONSOLE_QUEUE_LIMIT = 10000;
  const UNKNOWN_CONSOLE_LIMIT = 1000; // console calls kept before the verdict (a tracked tab's verdict comes at document_idle)

  let tracked = null; // null = not known yet, then true / false
  let pending = [];
  let capture = { logs: true, network: true, websocket: true, actions: true };
  let outbox = [];
  let dropped = 0;

  const emit = (kind, payload) => {
    if (tracked === false) return;
    if (kind === 'log' && payload.type === 'console' && !capture.logs) return;
    if ((kind === 'network_body' || (kind === 'log' && payload.type === 'network')) && !capture.network) return;
    if (kind === 'ws' && !capture.websocket) return;
    if (kind === 'action' && !capture.actions) return;
    if (tracked === null) {
      pending.push([kind, payload]);
      if (pending.length > PENDING_LIMIT) pending.shift();
      return;
    }
    outbox.push({ kind, payload });
    if (outbox.length > 2 * OUTBOX_LIMIT) {
      dropped += outbox.length - OUTBOX_LIMIT;
      outbox = outbox.slice(-OUTBOX_LIMIT); // trimmed in bulk: a logging loop stays O(1) per call
    }
  };

  // Every wrapper we install, so a tab found not to be tracked gets the page's own functions back
  // (a wrapper defined in an extension script makes each call a little dearer even when it only
  // passes the call on: Chrome attributes the native call to the extension's script) and a tab
  // that becomes tracked later gets them again. A function the page replaced after us is left
  // alone.
  const hooks = [];
  const hook = (target, name, wrapper) => {
    const original = target[name];
    hooks.push({ target, name, original, wrapper });
    target[name] = wrapper;
  };
  const setHooks = (on) => {
    for (const h of hooks) {
      const current = h.target[h.name];
      if (on && current === h.original) h.target[h.name] = h.wrapper;
      else if (!on && current === h.wrapper) h.target[h.name] = h.original;
    }
  };

  // Work that waits for the page's load event runs in one task right after it (at once when the
  // page has loaded already), so the load event itself carries a single small listener.
  let onLoad = [];
  const whenLoaded = (fn) => {
    if (onLoad === null) setTimeout(fn, 0);
    else onLoad.push(fn);
  };
  const runOnLoad = () => setTimeout(() => {
    const fns = onLoad;
    onLoad = null;
    for (const fn of fns) {
      try { fn(); } catch (_) { /* capture must never break the page */ }
    }
  }, 0);
  if (document.readyState === 'complete') runOnLoad();
  else window.addEventListener('load', runOnLoad, { once: true });

  // No verdict at all (a page the worker cannot script, or no worker): stop buffering a few seconds
  // after load. A verdict that comes later still switches capture on.
  const NO_VERDICT_AFTER_LOAD_MS = 5000;
  whenLoaded(() => setTimeout(() => {
    if (tracked !== null) return;
    tracked = false;
    pending = [];
    consoleQueue = [];
    setHooks(false);
  }, NO_VERDICT_AFTER_LOAD_MS));

  // ---------------------------------------------------------------- the worker's handle
  // The service worker reaches this closure with chrome.scripting.executeScript in this world
  // (lib/pages.js): a verdict once the page has loaded, then a pull every few hundred milliseconds
  // while the tab is tracked. No isolated world and no postMessage relay: creating and tearing down
  // an isolated world costs every navigation of a tracked tab a few milliseconds, and posted
  // messages reach the page's own message listeners. The page can call these too; all it can do
  // with them is take or replace its own capture, which it could always do by logging.
  let navigationReported = false;
  const track = (on, flags) => {
    tracked = !!on;
    setHooks(tracked);
    if (flags && typeof flags === 'object') {
      for (const key of Object.keys(capture)) {
        if (typeof flags[key] === 'boolean') capture[key] = flags[key];
      }
    }
    const queued = pending;
    pending = [];
    if (tracked) {
      if (!navigationReported) {
        navigationReported = true;
        emit('action', { type: 'navigate', timestamp: Date.now(), url: location.href, from_url: document.referrer || '', to_url: location.href });
      }
      for (const [k, p] of queued) emit(k, p);
      if (consoleQueue.length) scheduleConsole();
    } else {
      consoleQueue = [];
      outbox = [];
    }
    return take(false);
  };
  // What was captured since the last pull. `final`: the tab is navigating away (the worker asks
  // when the next navigation starts), so the performance snapshot goes now if it has not gone, and
  // console calls still waiting for an idle moment are serialized within a few milliseconds.
  const FINAL_BUDGET_MS = 5;
  const take = (final) => {
    if (tracked !== true) return { items: [], dropped: 0 };
    if (final) {
      sendSnapshot();
      const until = performance.now() + FINAL_BUDGET_MS;
      drainConsole({ didTimeout: false, timeRemaining: () => until - performance.now() });
    }
    const items = outbox.length > TAKE_LIMIT ? outbox.slice(0, TAKE_LIMIT) : outbox;
    outbox = outbox.length > TAKE_LIMIT ? outbox.slice(TAKE_LIMIT) : [];
    const lost = dropped;
    dropped = 0;
    return { items, dropped: lost, more: outbox.length };
  };
  Object.defineProperty(window, '__gasolineHooks', {
    value: Object.freeze({ version: 1, track, take }),
    enumerable: false, writable: false, configurable: false,
  });

  // ---------------------------------------------------------------- safe serialization
  const describeNode = (node) => {
    if (node.nodeType === 1) {
      let s = '<' + node.tagName.toLowerCase();
      if (node.id) s += '#' + node.id;
      if (typeof node.className === 'string' && node.className.trim()) {
        s += '.' + node.className.trim().split(/\s+/).slice(0, 3).join('.');
      }
      return s + '>';
    }
    if (node.nodeType === 3) return '#text "' + String(node.textContent).slice(0, 50) + '"';
    if (node.nodeType === 9) return '#document';
    return '#node(' + node.nodeName + ')';
  };

  const serialize = (value, depth = 0, seen = new WeakSet()) => {
    const t = typeof value;
    if (value === null || t === 'boolean') return value;
    if (t === 'number') return Number.isFinite(value) ? value : String(value);
    if (t === 'string') return value.length > MESSAGE_LIMIT ? value.slice(0, MESSAGE_LIMIT) + '…[truncated]' : value;
    if (t === 'undefined') return '[undefined]';
    if (t === 'bigint') return value.toString() + 'n';
    if (t === 'symbol') return value.toString();
    if (t === 'function') return '[Function ' + (value.name || 'anonymous') + ']';
    try {
      if (value instanceof Error) {
        return { name: value.name, message: String(value.message), stack: String(value.stack || '').slice(0, 4000) };
      }
      if (typeof Node !== 'undefined' && value instanceof Node) return describeNode(value);
      if (typeof Window !== 'undefined' && value instanceof Window) return '[Window]';
      if (value instanceof Date) return isNaN(value) ? 'Invalid Date' : value.toISOString();
      if (value instanceof RegExp) return value.toString();
      if (seen.has(value)) return '[Circular]';
      seen.add(value);
      if (depth >= 4) return Array.isArray(value) ? '[Array(' + value.length + ')]' : '[Object]';
      if (value instanceof Map) {
        const out = {};
        let i = 0;
        for (const [k, v] of value) {
          if (i++ >= 50) { out['…'] = (value.size - 50) + ' more'; break; }
          out[String(k)] = serialize(v, depth + 1, seen);
        }
        return { '[Map]': out };
      }
      if (value instanceof Set) return { '[Set]': Array.from(value).slice(0, 50).map((v) => serialize(v, depth + 1, seen)) };
      if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) return '[' + value.constructor.name + ' ' + value.byteLength + ' bytes]';
      if (Array.isArray(value)) {
        const out = value.slice(0, 100).map((v) => serialize(v, depth + 1, seen));
        if (value.length > 100) out.push('…' + (value.length - 100) + ' more');
        return out;
      }
      const out = {};
      let n = 0;
      for (const key of Object.keys(value)) {
        if (n++ >= 50) { out['…'] = 'more keys'; break; }
        let v;
        try { v = value[key]; } catch (e) { v = '[Getter threw]'; }
        out[key] = serialize(v, depth + 1, seen);
      }
      return out;
    } catch (e) {
      return '[Unserializable]';
    }
  };

  const stringify = (arg) => {
    if (typeof arg === 'string') return arg;
    try {
      const s = serialize(arg);
      return typeof s === 'string' ? s : JSON.stringify(s);
    } catch (_) {
      return String(arg);
    }
  };

  const limitArgs = (args) => {
    const out = [];
    let budget = 64000;
    for (const a of args) {
      const s = serialize(a);
      let size;
      try { size = JSON.stringify(s).length; } catch (_) { size = 0; }
      if (size > budget) { out.push('[truncated: argument of ' + size + ' chars]'); budget = 0; continue; }
      budget -= size;
      out.push(s);
    }
    return out;
  };

  const callerSource = (error) => {
    const stack = (error && error.stack) || '';
    const lines = stack.split('\n').slice(1);
    for (const line of lines) {
      if (line.includes(SCRIPT_NAME)) continue; // our own frames
      const m = line.match(/\(?((?:https?|file|chrome-extension):\/\/[^)\s]+)\)?\s*$/);
      if (m) return m[1];
    }
    return '';
  };

  // ---------------------------------------------------------------- console
  // Raw console calls waiting for the idle callback: [level, args, error (for the stack), ms, url].
  let consoleQueue = [];
  let consoleScheduled = false;
  // Deferred work runs in an idle period after the page's load event, never during the load:
  // asking for an idle callback (or any timer) while the page parses can pull a rendering frame in
  // before DOMContentLoaded, which costs the load far more than the work itself.
  let afterLoad = [];
  const idleNow = typeof requestIdleCallback === 'function'
    ? (fn) => requestIdleCallback(fn, { timeout: 1000 })
    : (fn) => setTimeout(() => fn(null), 50);
  const idle = (fn) => {
    if (afterLoad === null) idleNow(fn);
    else afterLoad.push(fn);
  };
  whenLoaded(() => {
    const waiting = afterLoad || [];
    afterLoad = null;
    for (const fn of waiting) idleNow(fn);
  });

  const consoleEntry = ([level, args, error, ms, url]) => {
    const message = args.map(stringify).join(' ');
    return {
      ts: new Date(ms).toISOString(),
      url,
      type: 'console',
      level,
      message: message.length > MESSAGE_LIMIT ? message.slice(0, MESSAGE_LIMIT) + '…[truncated]' : message,
      source: callerSource(error),
      args: limitArgs(args),
    };
  };

  const drainConsole = (deadline) => {
    consoleScheduled = false;
    if (tracked === null) return; // the verdict schedules the drain
    if (tracked === false) { consoleQueue = []; return; }
    let i = 0;
    const queue = consoleQueue.length > CONSOLE_QUEUE_LIMIT ? consoleQueue.slice(-CONSOLE_QUEUE_LIMIT) : consoleQueue;
    for (; i < queue.length; i++) {
      // Keep idle slices short; what is left goes to the next one.
      if (deadline && !deadline.didTimeout && i > 0 && deadline.timeRemaining() < 1) break;
      try { emit('log', consoleEntry(queue[i])); } catch (_) { /* capture must never break the page */ }
    }
    consoleQueue = queue.slice(i);
    if (consoleQueue.length) scheduleConsole();
  };

  const scheduleConsole = () => {
    if (consoleScheduled) return;
    consoleScheduled = true;
    idle(drainConsole);
  };

  for (const level of ['log', 'info', 'warn', 'error', 'debug']) {
    const original = console[level];
    if (typeof original !== 'function') continue;
    hook(console, level, function (...args) {
      if (tracked !== false && capture.logs) {
        try {
          consoleQueue.push([level, args, new Error(), Date.now(), location.href]);
          // Bounded, newest kept (trimmed in bulk so a logging loop stays O(1) per call); the
          // worker's own buffer bounds what reaches the daemon and counts what it drops.
          const cap = tracked ? CONSOLE_QUEUE_LIMIT : UNKNOWN_CONSOLE_LIMIT;
          if (consoleQueue.length >= 2 * cap) consoleQueue = consoleQueue.slice(-cap);
          scheduleConsole();
        } catch (_) { /* capture must never break the page */ }
      }
      return original.apply(this, args);
    });
  }

  // ---------------------------------------------------------------- errors
  window.addEventListener('error', (event) => {
    if (event.target !== window && event.target && event.target.tagName) return; // resource load errors
    const err = event.error;
    emit('log', {
      ts: new Date().toISOString(),
      url: location.href,
      level: 'error',
      type: 'exception',
      message: String(event.message || (err && err.message) || 'Uncaught error'),
      source: (event.filename || '') + ':' + (event.lineno || 0),
      filename: event.filename || '',
      lineno: event.lineno || 0,
      colno: event.colno || 0,
      stack: err && err.stack ? String(err.stack).slice(0, 8000) : '',
    });
  }, true);

  window.addEventListener('unhandledrejection', (event) => {
    const reason = event.reason;
    const isErr = reason instanceof Error;
    emit('log', {
      ts: new Date().toISOString(),
      url: location.href,
      level: 'error',
      type: 'exception',
      message: 'Unhandled promise rejection: ' + (isErr ? reason.name + ': ' + reason.message : stringify(reason)),
      source: 'unhandledrejection',
      filename: '',
      lineno: 0,
      colno: 0,
      stack: isErr && reason.stack ? String(reason.stack).slice(0, 8000) : '',
    });
  });

  // ---------------------------------------------------------------- network helpers
  const AUTH_PATH = /\/(?:login|logout|signin|sign-in|signup|sign-up|register|auth|oauth2?|token|password|passwd|session|sessions|2fa|mfa|otp|credentials?)(?:[/?#.]|$)/i;
  const SENSITIVE_HEADER = /^(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key|api-key|x-auth-token|x-csrf-token|x-xsrf-token|x-access-token|x-refresh-token|x-gasoline-key)$/i;
  const BINARY_TYPE = /^(?:image|audio|video|font)\/|application\/(?:octet-stream|pdf|zip|gzip|x-protobuf|protobuf|wasm|x-tar|x-7z|vnd\.)/i;

  const isAuthUrl = (url) => {
    try { return AUTH_PATH.test(new URL(url, location.href).pathname); } catch (_) { return false; }
  };

  const cleanHeaders = (entries) => {
    const out = {};
    for (const [k, v] of entries) {
      if (!SENSITIVE_HEADER.test(k)) out[k.toLowerCase()] = String(v).slice(0, 500);
    }
    return out;
  };

  const truncate = (text, limit) => {
    if (text.length <= limit) return [text, false];
    return [text.slice(0, limit), true];
  };

  const describeRequestBody = (body) => {
    if (body === undefined || body === null) return [undefined, false];
    if (typeof body === 'string') return truncate(body, REQUEST_BODY_LIMIT);
    if (body instanceof URLSearchParams) return truncate(body.toString(), REQUEST_BODY_LIMIT);
    if (typeof FormData !== 'undefined' && body instanceof FormData) {
      const parts = [];
      for (const [k, v] of body.entries()) {
        parts.push(k + '=' + (typeof v === 'string' ? v : '[file ' + (v.name || 'blob') + ', ' + v.size + ' bytes]'));
      }
      return truncate('[form-data] ' + parts.join('&'), REQUEST_BODY_LIMIT);
    }
    if (typeof Blob !== 'undefined' && body instanceof Blob) return ['[binary: ' + (body.type || 'blob') + ', ' + body.size + ' bytes]', false];
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return ['[binary: ' + body.byteLength + ' bytes]', false];
    if (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) return ['[stream]', false];
    return truncate(String(body), REQUEST_BODY_LIMIT);
  };

  const readLimited = async (response, limit) => {
    // Reads at most `limit` characters from a cloned response, then cancels the clone.
    if (!response.body) return ['', false];
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    let truncated = false;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
      if (text.length > limit) {
        truncated = true;
        text = text.slice(0, limit);
        try { await reader.cancel(); } catch (_) { /* ignore */ }
        break;
      }
    }
    return [text, truncated];
  };

  const emitNetwork = (info) => {
    // info: {method, url, status, statusText, duration, requestBody, responseBody, contentType,
    //        requestTruncated, responseTruncated, error, requestHeaders, responseHeaders, initiator}
    const auth = isAuthUrl(info.url);
    const body = {
      ts: new Date().toISOString(),
      method: info.method,
      url: info.url,
      status: info.status,
      content_type: info.contentType || '',
      duration: Math.round(info.duration),
      initiator: info.initiator,
      page_url: location.href,
    };
    if (info.requestBody !== undefined) {
      body.request_body = auth ? '[redacted: auth endpoint]' : info.requestBody;
      if (!auth && info.requestTruncated) body.request_truncated = true;
    }
    if (info.responseBody !== undefined) {
      body.response_body = auth ? '[redacted: auth endpoint]' : info.responseBody;
      if (!auth && info.responseTruncated) body.response_truncated = true;
    }
    if (info.requestHeaders) body.request_headers = info.requestHeaders;
    if (info.responseHeaders) body.response_headers = info.responseHeaders;
    if (info.error) body.error = info.error;
    emit('network_body', body);
    if (info.error || info.status >= 400) {
      const entry = {
        ts: body.ts,
        url: info.url,
        level: 'error',
        type: 'network',
        method: info.method,
        status: info.status,
        statusText: info.statusText || '',
        duration: body.duration,
        response: info.responseBody === undefined ? '' : String(body.response_body).slice(0, 2000),
        page_url: location.href,
      };
      if (info.error) entry.error = info.error;
      if (info.responseHeaders) entry.headers = info.responseHeaders;
      entry.message = info.method + ' ' + info.url + ' → ' + (info.error ? 'failed: ' + info.error : info.status + ' ' + (info.statusText || ''));
      emit('log', entry);
    }
  };

  // ---------------------------------------------------------------- fetch
  const originalFetch = window.fetch;
  if (typeof originalFetch === 'function') {
    hook(window, 'fetch', function (input, init) {
      if (tracked === false) return originalFetch.apply(this, arguments);
      const started = performance.now();
      // A body inside a Request is consumed by fetch: clone it first (the only work done before
      // the request goes out; everything else waits for the response).
      let requestBodyPromise = null;
      try {
        if (typeof Request !== 'undefined' && input instanceof Request && !(init && init.body !== undefined)
            && !/^(?:GET|HEAD)$/i.test(input.method) && !input.bodyUsed) {
          requestBodyPromise = input.clone().text().then((t) => truncate(t, REQUEST_BODY_LIMIT), () => [undefined, false]);
        }
      } catch (_) { /* keep going without the body */ }
      const promise = originalFetch.apply(this, arguments);
      const describe = async () => {
        const req = (typeof Request !== 'undefined' && input instanceof Request) ? input : null;
        let url = '';
        let method = 'GET';
        let requestBody;
        let requestTruncated = false;
        let requestHeaders;
        try {
          url = new URL(req ? req.url : String(input), location.href).href;
          method = String((init && init.method) || (req && req.method) || 'GET').toUpperCase();
          [requestBody, requestTruncated] = describeRequestBody(init ? init.body : undefined);
          const h = new Headers((init && init.headers) || (req && req.headers) || undefined);
          requestHeaders = cleanHeaders(h.entries());
        } catch (_) { /* keep going with what we have */ }
        if (requestBodyPromise) [requestBody, requestTruncated] = await requestBodyPromise;
        return { method, url, requestBody, requestTruncated, requestHeaders, initiator: 'fetch' };
      };
      promise.then(async (response) => {
        if (tracked === false) return;
        try {
          // Clone before the first await: the page's own .then() (queued after this one) may
          // consume the body.
          const copy = response.type !== 'opaque' && response.body && !response.bodyUsed ? response.clone() : null;
          await new Promise((resolve) => idle(resolve)); // the rest waits for an idle moment
          if (tracked === false) { if (copy) copy.body.cancel().catch(() => {}); return; }
          const request = await describe();
          const contentType = response.headers.get('content-type') || '';
          const responseHeaders = cleanHeaders(response.headers.entries());
          let responseBody;
          let responseTruncated = false;
          if (/text\/event-stream/i.test(contentType)) {
            responseBody = '[stream: text/event-stream]';
          } else if (BINARY_TYPE.test(contentType)) {
            const len = response.headers.get('content-length');
            responseBody = '[binary: ' + contentType + (len ? ', ' + len + ' bytes' : '') + ']';
          } else if (copy) {
            [responseBody, responseTruncated] = await readLimited(copy, RESPONSE_BODY_LIMIT);
          } else if (response.type !== 'opaque') {
            responseBody = '';
          }
          if (copy && responseBody === undefined) copy.body.cancel().catch(() => {});
          emitNetwork(Object.assign(request, {
            status: response.status, statusText: response.statusText,
            duration: performance.now() - started, responseBody, responseTruncated, contentType,
            responseHeaders,
          }));
        } catch (_) { /* ignore */ }
      }, async (error) => {
        if (tracked === false) return;
        try {
          await new Promise((resolve) => idle(resolve));
          const request = await describe();
          emitNetwork(Object.assign(request, {
            status: 0, statusText: '', duration: performance.now() - started,
            error: String((error && error.message) || error),
          }));
        } catch (_) { /* ignore */ }
      });
      return promise;
    });
  }

  // ---------------------------------------------------------------- XMLHttpRequest
  const XHR = window.XMLHttpRequest;
  if (XHR) {
    const open = XHR.prototype.open;
    const send = XHR.prototype.send;
    const setRequestHeader = XHR.prototype.setRequestHeader;
    hook(XHR.prototype, 'open', function (method, url) {
      // Resolved against the page's URL when the request ends (the document URL of this call).
      this.__gasoline = tracked === false ? undefined : { method, url, base: location.href, headers: [] };
      return open.apply(this, arguments);
    });
    hook(XHR.prototype, 'setRequestHeader', function (name, value) {
      if (this.__gasoline) this.__gasoline.headers.push([name, value]);
      return setRequestHeader.apply(this, arguments);
    });
    hook(XHR.prototype, 'send', function (body) {
      const info = this.__gasoline;
      if (info && tracked !== false) {
        const started = performance.now();
        this.addEventListener('loadend', () => {
          if (tracked === false) return;
          try {
            info.method = String(info.method || 'GET').toUpperCase();
            try { info.url = new URL(String(info.url), info.base).href; } catch (_) { info.url = String(info.url); }
            const [requestBody, requestTruncated] = describeRequestBody(body);
            const contentType = this.getResponseHeader('content-type') || '';
            let responseBody;
            let responseTruncated = false;
            if (this.responseType === '' || this.responseType === 'text') {
              if (BINARY_TYPE.test(contentType)) responseBody = '[binary: ' + contentType + ']';
              else [responseBody, responseTruncated] = truncate(String(this.responseText || ''), RESPONSE_BODY_LIMIT);
            } else if (this.responseType === 'json') {
              let s = '';
              try { s = JSON.stringify(this.response); } catch (_) { s = ''; }
              [responseBody, responseTruncated] = truncate(s || '', RESPONSE_BODY_LIMIT);
            } else if (this.response) {
              responseBody = '[binary: ' + this.responseType + ']';
            }
            const failed = this.status === 0;
            emitNetwork({
              method: info.method, url: info.url, status: this.status, statusText: this.statusText,
              duration: performance.now() - started, requestBody, requestTruncated,
              responseBody: failed ? undefined : responseBody, responseTruncated, contentType,
              error: failed ? 'network error' : undefined,
              requestHeaders: cleanHeaders(info.headers), initiator: 'xhr',
            });
          } catch (_) { /* ignore */ }
        });
      }
      return send.apply(this, arguments);
    });
  }

  // ---------------------------------------------------------------- WebSocket
  const NativeWebSocket = window.WebSocket;
  if (typeof NativeWebSocket === 'function') {
    let counter = 0;
    const frame = (data) => {
      if (typeof data === 'string') {
        const [text, truncated] = truncate(data, WS_FRAME_LIMIT);
        return { data: text, size: data.length, truncated };
      }
      const size = data && (data.byteLength !== undefined ? data.byteLength : data.size);
      return { data: '[binary ' + (size || 0) + ' bytes]', size: size || 0, binary: true };
    };
    class GasolineWebSocket extends NativeWebSocket {
      constructor(url, protocols) {
        super(url, protocols);
        if (tracked === false) return;
        const id = 'ws-' + Date.now().toString(36) + '-' + (++counter);
        Object.defineProperty(this, '__gasolineId', { value: id });
        const wsUrl = this.url;
        const base = () => ({ ts: new Date().toISOString(), type: 'websocket', id, url: wsUrl });
        this.addEventListener('open', () => emit('ws', Object.assign(base(), { event: 'open', protocol: this.protocol })));
        this.addEventListener('message', (e) => emit('ws', Object.assign(base(), { event: 'message', direction: 'incoming' }, frame(e.data))));
        this.addEventListener('close', (e) => emit('ws', Object.assign(base(), { event: 'close', code: e.code, reason: e.reason, was_clean: e.wasClean })));
        this.addEventListener('error', () => emit('ws', Object.assign(base(), { event: 'error' })));
      }
      send(data) {
        try {
          emit('ws', Object.assign({ ts: new Date().toISOString(), type: 'websocket', id: this.__gasolineId, url: this.url, event: 'message', direction: 'outgoing' }, frame(data)));
        } catch (_) { /* ignore */ }
        return super.send(data);
      }
    }
    Object.defineProperty(GasolineWebSocket, 'name', { value: 'WebSocket' });
    hook(window, 'WebSocket', GasolineWebSocket);
  }

  // ---------------------------------------------------------------- performance
  const perf = { fcp: null, lcp: null, cls: 0, inp: null, longTasks: [] };
  const observe = (type, handler) => {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(handler)).observe({ type, buffered: true });
    } catch (_) { /* unsupported entry type */ }
  };
  // Paints, LCP, layout shifts and long tasks are buffered by the browser, so these observers are
  // registered after the load (buffered: true hands them everything from the start): an observer
  // registered during the load has its callbacks run during the load. Event timing buffers only
  // slow interactions, so its observer starts now.
  whenLoaded(() => {
    observe('paint', (e) => { if (e.name === 'first-contentful-paint') perf.fcp = e.startTime; });
    observe('largest-contentful-paint', (e) => { perf.lcp = e.startTime; });
    observe('layout-shift', (e) => { if (!e.hadRecentInput) perf.cls += e.value; });
    observe('longtask', (e) => { perf.longTasks.push(e.duration); });
  });
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        if (e.interactionId && (perf.inp === null || e.duration > perf.inp)) perf.inp = e.duration;
      }
    }).observe({ type: 'event', buffered: true, durationThreshold: 16 });
  } catch (_) { /* unsupported */ }

  const round = (v) => (v === null || v === undefined ? null : Math.round(v * 10) / 10);

  const buildSnapshot = () => {
    const nav = performance.getEntriesByType('navigation')[0];
    const resources = performance.getEntriesByType('resource');
    const byType = {};
    let transfer = 0;
    let decoded = 0;
    for (const r of resources) {
      const t = r.initiatorType || 'other';
      byType[t] = byType[t] || { count: 0, transfer_size: 0 };
      byType[t].count += 1;
      byType[t].transfer_size += r.transferSize || 0;
      transfer += r.transferSize || 0;
      decoded += r.decodedBodySize || 0;
    }
    const slowest = resources.slice().sort((a, b) => b.duration - a.duration).slice(0, 5).map((r) => ({
      url: r.name, duration: round(r.duration), size: r.transferSize || 0, type: r.initiatorType,
    }));
    const tbt = perf.longTasks.reduce((sum, d) => sum + Math.max(0, d - 50), 0);
    const userTiming = performance.getEntriesByType('mark').concat(performance.getEntriesByType('measure'))
      .slice(0, 20).map((m) => ({ name: m.name, type: m.entryType, start: round(m.startTime), duration: round(m.duration) }));
    return {
      url: location.href,
      timestamp: new Date().toISOString(),
      timing: {
        dom_content_loaded: nav ? round(nav.domContentLoadedEventEnd) : null,
        load: nav ? round(nav.loadEventEnd) : null,
        first_contentful_paint: round(perf.fcp),
        largest_contentful_paint: round(perf.lcp),
        interaction_to_next_paint: round(perf.inp),
        time_to_first_byte: nav ? round(nav.responseStart - nav.requestStart) : null,
        dom_interactive: nav ? round(nav.domInteractive) : null,
      },
      network: {
        request_count: resources.length,
        transfer_size: transfer,
        decoded_size: decoded,
        by_type: byType,
        slowest_requests: slowest,
      },
      long_tasks: {
        count: perf.longTasks.length,
        total_blocking_time: round(tbt),
        longest: round(perf.longTasks.length ? Math.max(...perf.longTasks) : 0),
      },
      cumulative_layout_shift: Math.round(perf.cls * 10000) / 10000,
      user_timing: userTiming,
    };
  };

  let snapshotSent = false;
  const sendSnapshot = () => {
    if (snapshotSent || tracked === false) return;
    snapshotSent = true;
    try { emit('perf', buildSnapshot()); } catch (_) { /* ignore */ }
  };
  // 1.5 s after the load, or when the worker's final pull comes first (take(true)).
  whenLoaded(() => setTimeout(sendSnapshot, 1500));

  // ---------------------------------------------------------------- user actions
  // What a person does on the page: click, input (debounced), select and checkbox/radio changes,
  // special and modified keys, scrolling (at most once a second), history navigations. Listeners
  // sit in the capture phase of this world; nothing is recorded unless the tab is tracked. An
  // agent's dom_action and the draw-mode overlay (commands.js, isolated world) announce themselves
  // with two DOM events and what happens in between is not the user's.
  const selectorsFor = (el) => {
    try {
      if (selectors) return selectors.selectorsFor(el);
    } catch (_) { /* fall back to the basics */ }
    const out = { tag: el.tagName.toLowerCase() };
    if (el.id) out.css = '#' + el.id;
    const testId = el.getAttribute('data-testid');
    if (testId) out.testId = testId;
    const aria = el.getAttribute('aria-label');
    if (aria) out.ariaLabel = aria;
    return out;
  };
  const isPassword = (el) => !!el && el.tagName === 'INPUT'
    && (el.type === 'password' || /password|passwd|secret|otp|cc-number|cc-csc/i.test(el.autocomplete || ''));
  let agentActing = 0;
  window.addEventListener('__gasoline_agent_acting__', () => { agentActing += 1; }, true);
  window.addEventListener('__gasoline_agent_done__', () => { agentActing = Math.max(0, agentActing - 1); }, true);
  const recording = () => tracked === true && capture.actions && agentActing === 0;
  const record = (action) => {
    action.timestamp = Date.now();
    action.url = location.href;
    emit('action', action);
  };

  document.addEventListener('click', (e) => {
    if (!recording()) return;
    const el = e.target instanceof Element ? e.target : null;
    if (el) record({ type: 'click', selectors: selectorsFor(el), x: Math.round(e.clientX), y: Math.round(e.clientY) });
  }, true);

  const inputTimers = new WeakMap();
  document.addEventListener('input', (e) => {
    if (!recording()) return;
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
    if (!recording()) return;
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
    if (!recording()) return;
    if (!SPECIAL_KEYS.has(e.key) && !(e.ctrlKey || e.metaKey || e.altKey)) return;
    const el = e.target instanceof Element ? e.target : null;
    // A modified printable key in a password field would reveal a character; record only the modifier.
    const key = isPassword(el) && e.key.length === 1 ? '[redacted]' : e.key;
    record({ type: 'keypress', key, modifiers: { ctrl: e.ctrlKey, meta: e.metaKey, alt: e.altKey, shift: e.shiftKey }, selectors: el ? selectorsFor(el) : undefined });
  }, true);

  let scrollTimer = null;
  window.addEventListener('scroll', () => {
    if (scrollTimer || !recording()) return;
    scrollTimer = setTimeout(() => {
      scrollTimer = null;
      record({ type: 'scroll', scroll_x: Math.round(window.scrollX), scroll_y: Math.round(window.scrollY) });
    }, 1000);
  }, { passive: true, capture: true });

  window.addEventListener('popstate', () => { if (recording()) record({ type: 'navigate', to_url: location.href, trigger: 'popstate' }); });
  window.addEventListener('hashchange', (e) => { if (recording()) record({ type: 'navigate', from_url: e.oldURL, to_url: e.newURL, trigger: 'hashchange' }); });

  // ---------------------------------------------------------------- SPA navigations
  const notifyNavigate = (from) => {
    if (from !== location.href) emit('action', { type: 'navigate', timestamp: Date.now(), url: location.href, from_url: from, to_url: location.href });
  };
  for (const fn of ['pushState', 'replaceState']) {
    const original = history[fn];
    hook(history, fn, function () {
      const from = location.href;
      const result = original.apply(this, arguments);
      notifyNavigate(from);
      return result;
    });
  }
})();
//# sourceURL=gasoline-page-hooks.js
