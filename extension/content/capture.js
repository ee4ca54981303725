// Gasoline — page capture: turns the page hooks' raw records into items (MAIN world).
//
// The worker (lib/pages.js) injects this file, after content/selectors.js, into a page once it has
// loaded and its tab is tracked; content/hooks.js has kept raw records of console calls, errors,
// requests, WebSocket frames and history changes since document_start and hands them over when
// this module attaches (window.__gasolineHooks.attach). From then on records arrive one by one.
// Untracked pages never get this file.
//
// Cost on the page: the work is done off the page's own call paths. Console arguments are
// serialized and the calling script found when the main thread is idle (requestIdleCallback, at
// most 1 s later), so an object the page mutates right after logging it may be captured in its
// later state, as DevTools' live object view shows it. Request and response bodies are read at an
// idle moment too. User actions (click, input, select, keypress, scroll, history navigation) and
// the performance snapshot are recorded here, from this module's arrival on.
(() => {
  'use strict';
  const hooks = window.__gasolineHooks;
  // content/selectors.js ran just before this file in the same world; take its functions and take
  // the global away again, so the page neither sees nor replaces them.
  const selectors = window.__gasolineSelectors || null;
  try { delete window.__gasolineSelectors; } catch (_) { /* not configurable: leave it */ }
  if (!hooks || hooks.version !== 2 || typeof hooks.attach !== 'function') return 'gasoline-capture: no hooks';

  // The name the hooks go by in stack traces (their sourceURL comment). Without it Chrome
  // attributes every console call that passes through a hook to the extension (its URL is
  // chrome-extension://…) and files the page's own messages in the extension's error console.
  const HOOKS_NAME = 'gasoline-page-hooks.js';
  const REQUEST_BODY_LIMIT = 8192;
  const RESPONSE_BODY_LIMIT = 16384;
  const WS_FRAME_LIMIT = 4096;
  const MESSAGE_LIMIT = 10000;
  const OUTBOX_LIMIT = 5000; // items waiting for the worker's next pull (the oldest go first, counted)
  const TAKE_LIMIT = 1000;   // items handed over per pull
  const CONSOLE_QUEUE_LIMIT = 10000;
  const SNAPSHOT_AFTER_LOAD_MS = 1500;
  const START_BUDGET_MS = 3; // console serialization when tracking starts (FINAL_BUDGET_MS: at the final pull)

  let link = null; // the hooks' side: {capture, tracked()}
  let outbox = [];
  let dropped = 0;
  const capturing = () => link !== null && link.tracked() === true;

  const emit = (kind, payload) => {
    if (!capturing()) return;
    const capture = link.capture;
    if (kind === 'log' && payload.type === 'console' && !capture.logs) return;
    if ((kind === 'network_body' || (kind === 'log' && payload.type === 'network')) && !capture.network) return;
    if (kind === 'ws' && !capture.websocket) return;
    if (kind === 'action' && !capture.actions) return;
    outbox.push({ kind, payload });
    if (outbox.length > 2 * OUTBOX_LIMIT) {
      dropped += outbox.length - OUTBOX_LIMIT;
      outbox = outbox.slice(-OUTBOX_LIMIT); // trimmed in bulk: a logging loop stays O(1) per call
    }
  };
  const iso = (ms) => new Date(ms).toISOString();

  // Work that can wait runs when the main thread is idle (at most 1 s later).
  const idle = typeof requestIdleCallback === 'function'
    ? (fn) => requestIdleCallback(fn, { timeout: 1000 })
    : (fn) => setTimeout(() => fn(null), 50);

  // ---------------------------------------------------------------- console and errors
  // Raw console records waiting for an idle moment: ['console', level, args, error, ms, url].
  let consoleQueue = [];
  let consoleScheduled = false;

  const callerSource = (error) => {
    const stack = (error && error.stack) || '';
    for (const line of stack.split('\n').slice(1)) {
      if (line.includes(HOOKS_NAME)) continue; // our own frame
      const m = line.match(/\(?((?:https?|file|chrome-extension):\/\/[^)\s]+)\)?\s*$/);
      if (m) return m[1];
    }
    return '';
  };

  const consoleEntry = ([, level, args, error, ms, url]) => {
    const message = args.map(stringify).join(' ');
    return {
      ts: iso(ms),
      url,
      type: 'console',
      level,
      message: message.length > MESSAGE_LIMIT ? message.slice(0, MESSAGE_LIMIT) + '…[truncated]' : message,
      source: callerSource(error),
      args: limitArgs(args),
    };
  };

  // Serializes queued console calls while `deadline` allows; what is left waits for an idle moment.
  const drainConsole = (deadline) => {
    if (!capturing()) { consoleQueue = []; return; }
    const queue = consoleQueue.length > CONSOLE_QUEUE_LIMIT ? consoleQueue.slice(-CONSOLE_QUEUE_LIMIT) : consoleQueue;
    let i = 0;
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
    idle((deadline) => { consoleScheduled = false; drainConsole(deadline); });
  };
  // Serialize queued console calls now, for at most `ms` milliseconds.
  const drainFor = (ms) => {
    const until = performance.now() + ms;
    drainConsole({ didTimeout: false, timeRemaining: () => until - performance.now() });
  };
  const onConsole = (record) => {
    consoleQueue.push(record);
    // Bounded, newest kept (trimmed in bulk); the worker's own buffer bounds what reaches the
    // daemon and counts what it drops.
    if (consoleQueue.length >= 2 * CONSOLE_QUEUE_LIMIT) consoleQueue = consoleQueue.slice(-CONSOLE_QUEUE_LIMIT);
    scheduleConsole();
  };

  const onError = ([, event, ms, url]) => {
    const err = event.error;
    emit('log', {
      ts: iso(ms),
      url,
      level: 'error',
      type: 'exception',
      message: String(event.message || (err && err.message) || 'Uncaught error'),
      source: (event.filename || '') + ':' + (event.lineno || 0),
      filename: event.filename || '',
      lineno: event.lineno || 0,
      colno: event.colno || 0,
      stack: err && err.stack ? String(err.stack).slice(0, 8000) : '',
    });
  };

  const onRejection = ([, event, ms, url]) => {
    const reason = event.reason;
    const isErr = reason instanceof Error;
    emit('log', {
      ts: iso(ms),
      url,
      level: 'error',
      type: 'exception',
      message: 'Unhandled promise rejection: ' + (isErr ? reason.name + ': ' + reason.message : stringify(reason)),
      source: 'unhandledrejection',
      filename: '',
      lineno: 0,
      colno: 0,
      stack: isErr && reason.stack ? String(reason.stack).slice(0, 8000) : '',
    });
  };

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

  // ---------------------------------------------------------------- fetch and XMLHttpRequest
  // Redaction is not decided here, in the page's realm (the page could undo it): the service
  // worker's one redactor (lib/redact.js) handles every item before it leaves the browser.
  const BINARY_TYPE = /^(?:image|audio|video|font)\/|application\/(?:octet-stream|pdf|zip|gzip|x-protobuf|protobuf|wasm|x-tar|x-7z|vnd\.)/i;

  const cleanHeaders = (entries) => {
    const out = {};
    let n = 0;
    for (const [k, v] of entries) {
      if (++n > 100) break;
      out[String(k).toLowerCase().slice(0, 200)] = String(v).slice(0, 500);
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
    // info: {method, url, status, statusText, duration, ended, pageUrl, requestBody, responseBody,
    //        contentType, requestTruncated, responseTruncated, error, requestHeaders, responseHeaders,
    //        initiator}
    const body = {
      ts: iso(performance.timeOrigin + info.ended),
      method: info.method,
      url: info.url,
      status: info.status,
      content_type: info.contentType || '',
      duration: Math.round(info.duration),
      initiator: info.initiator,
      page_url: info.pageUrl,
    };
    if (info.requestBody !== undefined) {
      body.request_body = info.requestBody;
      if (info.requestTruncated) body.request_truncated = true;
    }
    if (info.responseBody !== undefined) {
      body.response_body = info.responseBody;
      if (info.responseTruncated) body.response_truncated = true;
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
        page_url: info.pageUrl,
      };
      if (info.error) entry.error = info.error;
      if (info.responseHeaders) entry.headers = info.responseHeaders;
      entry.message = info.method + ' ' + info.url + ' → ' + (info.error ? 'failed: ' + info.error : info.status + ' ' + (info.statusText || ''));
      emit('log', entry);
    }
  };
  // ['fetch', input, init, started, ended, requestBody (a promise or null), response, copy (a clone
  //  of the response, or null), error, pageUrl]
  const onFetch = async ([, input, init, started, ended, requestBodyPromise, response, copy, error, pageUrl]) => {
    await new Promise((resolve) => idle(resolve));
    if (!capturing()) { if (copy) copy.body.cancel().catch(() => {}); return; }
    const req = (typeof Request !== 'undefined' && input instanceof Request) ? input : null;
    const info = { method: 'GET', url: '', initiator: 'fetch', started, ended, duration: ended - started, pageUrl, requestTruncated: false };
    try {
      info.url = new URL(req ? req.url : String(input), pageUrl).href;
      info.method = String((init && init.method) || (req && req.method) || 'GET').toUpperCase();
      [info.requestBody, info.requestTruncated] = describeRequestBody(init ? init.body : undefined);
      info.requestHeaders = cleanHeaders(new Headers((init && init.headers) || (req && req.headers) || undefined).entries());
    } catch (_) { /* keep going with what we have */ }
    if (requestBodyPromise) {
      const text = await requestBodyPromise;
      if (typeof text === 'string') [info.requestBody, info.requestTruncated] = truncate(text, REQUEST_BODY_LIMIT);
    }
    if (!response) {
      info.status = 0;
      info.statusText = '';
      info.error = String((error && error.message) || error);
      emitNetwork(info);
      return;
    }
    info.status = response.status;
    info.statusText = response.statusText;
    info.contentType = response.headers.get('content-type') || '';
    info.responseHeaders = cleanHeaders(response.headers.entries());
    info.responseTruncated = false;
    if (/text\/event-stream/i.test(info.contentType)) {
      info.responseBody = '[stream: text/event-stream]';
    } else if (BINARY_TYPE.test(info.contentType)) {
      const len = response.headers.get('content-length');
      info.responseBody = '[binary: ' + info.contentType + (len ? ', ' + len + ' bytes' : '') + ']';
    } else if (copy) {
      [info.responseBody, info.responseTruncated] = await readLimited(copy, RESPONSE_BODY_LIMIT);
    } else if (response.type !== 'opaque') {
      info.responseBody = '';
    }
    if (copy && info.responseBody === undefined) copy.body.cancel().catch(() => {});
    emitNetwork(info);
  };

  // ['xhr', xhr, {method, url, base, headers, body, started}, ended]
  const onXhr = ([, xhr, request, ended]) => {
    const info = { initiator: 'xhr', started: request.started, ended, duration: ended - request.started, pageUrl: request.base };
    info.method = String(request.method || 'GET').toUpperCase();
    try { info.url = new URL(String(request.url), request.base).href; } catch (_) { info.url = String(request.url); }
    [info.requestBody, info.requestTruncated] = describeRequestBody(request.body);
    info.requestHeaders = cleanHeaders(request.headers);
    info.contentType = xhr.getResponseHeader('content-type') || '';
    info.status = xhr.status;
    info.statusText = xhr.statusText;
    let responseBody;
    let responseTruncated = false;
    if (xhr.responseType === '' || xhr.responseType === 'text') {
      if (BINARY_TYPE.test(info.contentType)) responseBody = '[binary: ' + info.contentType + ']';
      else [responseBody, responseTruncated] = truncate(String(xhr.responseText || ''), RESPONSE_BODY_LIMIT);
    } else if (xhr.responseType === 'json') {
      let s = '';
      try { s = JSON.stringify(xhr.response); } catch (_) { s = ''; }
      [responseBody, responseTruncated] = truncate(s || '', RESPONSE_BODY_LIMIT);
    } else if (xhr.response) {
      responseBody = '[binary: ' + xhr.responseType + ']';
    }
    const failed = xhr.status === 0;
    info.responseBody = failed ? undefined : responseBody;
    info.responseTruncated = responseTruncated;
    if (failed) info.error = 'network error';
    emitNetwork(info);
  };

  // ---------------------------------------------------------------- WebSocket
  // ['ws', ms, id, url, type, detail]: detail is the protocol (open), the data (message, send) or
  // the close event.
  const frame = (data) => {
    if (typeof data === 'string') {
      const [text, truncated] = truncate(data, WS_FRAME_LIMIT);
      return { data: text, size: data.length, truncated };
    }
    const size = data && (data.byteLength !== undefined ? data.byteLength : data.size);
    return { data: '[binary ' + (size || 0) + ' bytes]', size: size || 0, binary: true };
  };
  const onWebSocket = ([, ms, id, url, type, detail]) => {
    const item = { ts: iso(ms), type: 'websocket', id, url };
    if (type === 'open') Object.assign(item, { event: 'open', protocol: detail });
    else if (type === 'message') Object.assign(item, { event: 'message', direction: 'incoming' }, frame(detail));
    else if (type === 'send') Object.assign(item, { event: 'message', direction: 'outgoing' }, frame(detail));
    else if (type === 'close') Object.assign(item, { event: 'close', code: detail.code, reason: detail.reason, was_clean: detail.wasClean });
    else Object.assign(item, { event: 'error' });
    emit('ws', item);
  };

  // ---------------------------------------------------------------- performance
  const perf = { fcp: null, lcp: null, cls: 0, inp: null, longTasks: [] };
  const observe = (type, handler) => {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(handler)).observe({ type, buffered: true });
    } catch (_) { /* unsupported entry type */ }
  };
  // Registered when this module arrives (after the load): every entry type but event timing is
  // buffered by the browser from the start (buffered: true hands them over); event timing buffers
  // only interactions of 104 ms and more, so INP counts faster ones from here on.
  const observePerformance = () => {
    observe('paint', (e) => { if (e.name === 'first-contentful-paint') perf.fcp = e.startTime; });
    observe('largest-contentful-paint', (e) => { perf.lcp = e.startTime; });
    observe('layout-shift', (e) => { if (!e.hadRecentInput) perf.cls += e.value; });
    observe('longtask', (e) => { perf.longTasks.push(e.duration); });
    try {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) {
          if (e.interactionId && (perf.inp === null || e.duration > perf.inp)) perf.inp = e.duration;
        }
      }).observe({ type: 'event', buffered: true, durationThreshold: 16 });
    } catch (_) { /* unsupported */ }
  };

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
    if (snapshotSent || !capturing()) return;
    snapshotSent = true;
    try { emit('perf', buildSnapshot()); } catch (_) { /* ignore */ }
  };
  // 1.5 s after the load, or when the worker's final pull comes first (take(true)).
  const scheduleSnapshot = () => {
    const nav = performance.getEntriesByType('navigation')[0];
    if (nav && nav.loadEventEnd > 0) setTimeout(sendSnapshot, Math.max(0, SNAPSHOT_AFTER_LOAD_MS - (performance.now() - nav.loadEventEnd)));
    else window.addEventListener('load', () => setTimeout(sendSnapshot, SNAPSHOT_AFTER_LOAD_MS), { once: true });
  };

  // ---------------------------------------------------------------- user actions
  // What a person does on the page: click, input (debounced), select and checkbox/radio changes,
  // special and modified keys, scrolling (at most once a second), history navigations. Listeners
  // sit in the capture phase of this world; nothing is recorded unless the tab is tracked. An
  // agent's dom_action and the draw-mode overlay (commands.js, isolated world) announce themselves
  // with two DOM events and what happens in between is not the user's. listen() installs the
  // listeners once this module has attached.
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
  // What the worker's redactor needs to decide whether a field holds a secret (lib/redact.js
  // isSensitiveField: type, name, id, autocomplete); the decision is not made here.
  const fieldOf = (el) => (el && el.tagName ? {
    input_type: el.type || (el.isContentEditable ? 'contenteditable' : 'text'),
    input_name: String(el.getAttribute('name') || '').slice(0, 200),
    input_id: String(el.id || '').slice(0, 200),
    autocomplete: String(el.getAttribute('autocomplete') || '').slice(0, 200),
  } : {});
  let agentActing = 0;
  const recording = () => capturing() && link.capture.actions && agentActing === 0;
  const record = (action) => {
    action.timestamp = Date.now();
    action.url = location.href;
    emit('action', action);
  };

  const listen = () => {
    window.addEventListener('__gasoline_agent_acting__', () => { agentActing += 1; }, true);
    window.addEventListener('__gasoline_agent_done__', () => { agentActing = Math.max(0, agentActing - 1); }, true);
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
        const value = String(el.value !== undefined ? el.value : el.textContent || '').slice(0, 500);
        record(Object.assign({ type: 'input', selectors: selectorsFor(el), value }, fieldOf(el)));
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
      record(Object.assign({ type: 'keypress', key: e.key, modifiers: { ctrl: e.ctrlKey, meta: e.metaKey, alt: e.altKey, shift: e.shiftKey }, selectors: el ? selectorsFor(el) : undefined }, fieldOf(el)));
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
  };

  // ---------------------------------------------------------------- the hooks' side
  const handlers = {
    console: onConsole,
    error: onError,
    rejection: onRejection,
    fetch: (record) => { onFetch(record).catch(() => {}); },
    xhr: (record) => idle(() => { try { onXhr(record); } catch (_) { /* ignore */ } }),
    ws: onWebSocket,
    navigate: ([, ms, from, to]) => emit('action', { type: 'navigate', timestamp: ms, url: to, from_url: from, to_url: to }),
  };
  const receive = (record) => {
    const handle = handlers[record[0]];
    if (!handle) return;
    try { handle(record); } catch (_) { /* capture must never break the page */ }
  };

  // Tracking starts (again): the records the hooks kept so far and how many they had to drop.
  let started = false;
  const start = (records, missed) => {
    dropped += Number(missed) || 0;
    if (!started) {
      started = true;
      emit('action', { type: 'navigate', timestamp: Date.now(), url: location.href, from_url: document.referrer || '', to_url: location.href });
      observePerformance();
      scheduleSnapshot();
    }
    for (const record of records) receive(record);
    // The console calls of the load go with this first answer as far as a few milliseconds allow
    // (the rest at the next idle moment): a page left soon after its load has less for the
    // best-effort final pull.
    drainFor(START_BUDGET_MS);
    return take(false);
  };
  const stop = () => {
    consoleQueue = [];
    outbox = [];
    dropped = 0;
  };

  // What was captured since the last pull. `final`: the tab is navigating away (the worker asks
  // when the next navigation starts), so the performance snapshot goes now if it has not gone, and
  // console calls still waiting for an idle moment are serialized within a few milliseconds.
  const FINAL_BUDGET_MS = 5;
  const take = (final) => {
    if (!capturing()) return { items: [], dropped: 0 };
    if (final) {
      sendSnapshot();
      drainFor(FINAL_BUDGET_MS);
    }
    const items = outbox.length > TAKE_LIMIT ? outbox.slice(0, TAKE_LIMIT) : outbox;
    outbox = outbox.length > TAKE_LIMIT ? outbox.slice(TAKE_LIMIT) : [];
    const lost = dropped;
    dropped = 0;
    return { items, dropped: lost, more: outbox.length };
  };

  link = hooks.attach({ receive, start, stop, take });
  if (link) listen();
  // The value of this file's last expression is the injection's result, which goes straight to
  // the worker (lib/pages.js): the hooks take only the first module that attaches, so "refused"
  // means something in the page attached before us, and the worker will not trust this page.
  return link ? 'gasoline-capture: attached' : 'gasoline-capture: refused';
})();
//# sourceURL=gasoline-page-capture.js
