// Unit tests of extension/lib/failures.js: which chrome.webRequest events of a tab become a failed
// load's console entry (node:test; run by tests/test_extension_units.py). The events are plain
// objects shaped like Chromium's; no chrome.* is involved.
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { ERROR_ANSWERS_CAP, createLoadFailures, failureEntry } from '../../extension/lib/failures.js';

let nextId = 1;
/** One request of tab 7 (Chromium's webRequest details), with the fields each event carries. */
function request(type, { url = `http://127.0.0.1:1/missing-${type}`, tabId = 7, status = 404 } = {}) {
  const base = { requestId: String(nextId++), url, method: 'GET', type, tabId, frameId: 0, initiator: 'http://127.0.0.1:1', timeStamp: 1795787286766.5 };
  const statusLine = status ? `HTTP/1.1 ${status} ${status === 404 ? 'Not Found' : 'Error'}` : '';
  return {
    started: Object.assign({}, base, { statusCode: status, statusLine }),
    completed: Object.assign({}, base, { statusCode: status, statusLine }),
    error: (error) => Object.assign({}, base, { error }),
  };
}

// Every resource type webRequest reports that the page's hooks do not see.
const TYPES = ['main_frame', 'sub_frame', 'stylesheet', 'script', 'image', 'font', 'object', 'ping', 'csp_report', 'media', 'websocket', 'webtransport', 'webbundle', 'other'];
// How Chromium ends a request whose answer was an HTTP error: read to its end, or cut short by the
// renderer that had no use for the body (the race this module is about: ERR_ABORTED, ERR_FAILED).
const ENDINGS = {
  completed: (f, r) => f.completed(r.completed),
  'cut short (net::ERR_ABORTED)': (f, r) => f.errored(r.error('net::ERR_ABORTED')),
  'cut short (net::ERR_FAILED)': (f, r) => f.errored(r.error('net::ERR_FAILED')),
};

test('an HTTP error answer is reported with its status however the request ends, for every resource type', () => {
  for (const type of TYPES) {
    for (const status of [400, 404, 410, 500, 503]) {
      for (const [ending, end] of Object.entries(ENDINGS)) {
        const f = createLoadFailures();
        const r = request(type, { status });
        assert.equal(f.answered(r.started), null);
        const entry = end(f, r);
        const what = `${type} ${status} ${ending}`;
        assert.ok(entry, what);
        assert.equal(entry.status, status, what);
        assert.equal(entry.resource_type, type, what);
        assert.equal(entry.error, undefined, what);
        assert.equal(entry.level, 'error', what);
        assert.match(entry.message, new RegExp(` → ${status} `), what);
        // The same entry whichever way the race went (the end's own fields are the same request's).
        assert.deepEqual(entry, failureEntry(r.completed, status, ''), what);
        assert.equal(f.counts().pending_error_answers, 0, what);
      }
    }
  }
});

test('the counts tell a completed error answer from one cut short', () => {
  const f = createLoadFailures();
  for (const [, end] of Object.entries(ENDINGS)) {
    const r = request('stylesheet');
    f.answered(r.started);
    end(f, r);
  }
  assert.deepEqual(f.counts(), { pending_error_answers: 0, http: 1, network: 0, http_cut_short: 2, page_aborts: 0 });
});

test("an abort before any answer is the page's own: not reported; other network errors are, with status 0", () => {
  const f = createLoadFailures();
  assert.equal(f.errored(request('image', { status: 0 }).error('net::ERR_ABORTED')), null);
  for (const error of ['net::ERR_FAILED', 'net::ERR_CONNECTION_REFUSED', 'net::ERR_BLOCKED_BY_CLIENT', 'net::ERR_NAME_NOT_RESOLVED']) {
    const entry = f.errored(request('script', { status: 0 }).error(error));
    assert.equal(entry.status, 0, error);
    assert.equal(entry.error, error);
    assert.match(entry.message, new RegExp(`failed: ${error}`));
  }
  // A successful answer the page then aborts (it navigated away mid-body): still the page's own.
  const ok = request('image', { status: 200 });
  f.answered(ok.started);
  assert.equal(f.errored(ok.error('net::ERR_ABORTED')), null);
  assert.deepEqual(f.counts(), { pending_error_answers: 0, http: 0, network: 4, http_cut_short: 0, page_aborts: 2 });
});

test('successes, redirects, fetch/XHR (the page hooks see those) and requests of no tab are not reported', () => {
  const f = createLoadFailures();
  const ok = request('image', { status: 200 });
  assert.equal(f.answered(ok.started), null);
  assert.equal(f.completed(ok.completed), null);
  for (const make of [() => request('xmlhttprequest'), () => request('image', { tabId: -1 })]) {
    for (const [ending, end] of Object.entries(ENDINGS)) {
      const r = make();
      f.answered(r.started);
      assert.equal(end(f, r), null, ending);
    }
    assert.equal(f.errored(make().error('net::ERR_CONNECTION_REFUSED')), null);
  }
  // A request id lives across its redirects: an error answer followed by a redirect is forgotten.
  const hop = request('script');
  f.answered(hop.started);
  f.answered(Object.assign({}, hop.started, { statusCode: 200, statusLine: 'HTTP/1.1 200 OK' }));
  assert.equal(f.errored(hop.error('net::ERR_ABORTED')), null);
  assert.equal(f.counts().pending_error_answers, 0);
});

test('error answers whose end never comes (the worker was stopped in between) are bounded, the oldest forgotten', () => {
  const f = createLoadFailures({ cap: 3 });
  const rs = [1, 2, 3, 4, 5].map(() => request('image'));
  for (const r of rs) f.answered(r.started);
  assert.equal(f.counts().pending_error_answers, 3);
  // The two oldest were forgotten: their late abort reads as the page's own; the newest still count.
  assert.equal(f.errored(rs[0].error('net::ERR_ABORTED')), null);
  assert.equal(f.errored(rs[4].error('net::ERR_ABORTED')).status, 404);
  assert.equal(createLoadFailures().counts().pending_error_answers, 0);
  assert.ok(ERROR_ANSWERS_CAP >= 100);
});
