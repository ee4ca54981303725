// Gasoline — failed loads of a tracked tab that the page's own hooks cannot see.
//
// content/capture.js reports fetch and XHR failures from inside the page. An <img> or a script
// answered 404, a stylesheet blocked by the browser or an extension, a font or frame that never
// came: none of these go through fetch. chrome.webRequest sees every request of a tab whatever
// started it, with its status (onCompleted) or its network error (onErrorOccurred); each failure
// becomes a console-buffer entry of type "network" (what `observe errors` and `observe network`
// read), like the in-page ones. fetch/XHR requests (webRequest type "xmlhttprequest") are left to
// the page's hooks, which also see their bodies; so are requests the page aborted on purpose.
//
// An HTTP error answer does not always end in onCompleted. Blink gives up on a stylesheet, script
// or image whose answer is an error (it has no use for the body) and cancels the load; when that
// cancellation reaches the network service before the (small) body is read to its end, the request
// ends in onErrorOccurred with net::ERR_ABORTED (or net::ERR_FAILED), not in onCompleted. Which
// one wins is a race, lost more often on a loaded machine (loading the e2e test page 30 times on a
// busy 2-core machine: 13 of its 90 404s ended that way, in 11 of the 30 loads). The status arrived before (onResponseStarted), so the answered status is
// remembered per request until the request ends: such a request is reported with its HTTP status,
// as if it had completed, and only an abort before any answer is the page's own.

const ABORTED = 'net::ERR_ABORTED';
// Requests answered with an HTTP error and not ended yet, at most: an end the worker never sees (it
// was stopped in between) must not grow the table for ever; the oldest go first.
export const ERROR_ANSWERS_CAP = 500;

/** The console entry for one failed request (`status` 0 for a network error). */
export function failureEntry(d, status, error) {
  const method = d.method || 'GET';
  const what = status ? `${status}${d.statusLine ? ' ' + String(d.statusLine).replace(/^HTTP\/\S+\s+\d+\s*/, '') : ''}` : `failed: ${error}`;
  const entry = {
    ts: new Date(d.timeStamp || Date.now()).toISOString(),
    url: d.url,
    level: 'error',
    type: 'network',
    method,
    status,
    statusText: status ? String(d.statusLine || '').replace(/^HTTP\/\S+\s+\d+\s*/, '') : '',
    resource_type: d.type,
    initiator: d.initiator || '',
    message: `${method} ${d.url} → ${what.trim()} (${d.type})`,
  };
  if (error) entry.error = error;
  return entry;
}

/**
 * What the webRequest events of one worker become, without chrome.*: `answered(d)`
 * (onResponseStarted), `completed(d)` (onCompleted) and `errored(d)` (onErrorOccurred) each return
 * the failure entry to report, or null. `counts()`: how requests ended, for the status snapshot.
 */
export function createLoadFailures({ cap = ERROR_ANSWERS_CAP } = {}) {
  const errorAnswers = new Map(); // requestId -> {statusCode, statusLine}
  const counts = { http: 0, network: 0, http_cut_short: 0, page_aborts: 0 };
  // A tab's request the page's hooks do not see.
  const ours = (d) => Number.isInteger(d.tabId) && d.tabId >= 0 && d.type !== 'xmlhttprequest';

  function answered(d) {
    if (!ours(d)) return null;
    if (d.statusCode >= 400) {
      errorAnswers.delete(d.requestId); // re-inserted last: the oldest go first
      errorAnswers.set(d.requestId, { statusCode: d.statusCode, statusLine: d.statusLine || '' });
      while (errorAnswers.size > cap) errorAnswers.delete(errorAnswers.keys().next().value);
    } else {
      errorAnswers.delete(d.requestId);
    }
    return null;
  }

  function completed(d) {
    errorAnswers.delete(d.requestId);
    if (!ours(d) || !(d.statusCode >= 400)) return null;
    counts.http += 1;
    return failureEntry(d, d.statusCode, '');
  }

  function errored(d) {
    const answer = errorAnswers.get(d.requestId);
    errorAnswers.delete(d.requestId);
    if (!ours(d)) return null;
    if (answer) {
      // The browser stopped reading an error answer it had no use for: the failure is the status.
      counts.http_cut_short += 1;
      return failureEntry(Object.assign({}, d, { statusLine: answer.statusLine }), answer.statusCode, '');
    }
    if (d.error === ABORTED) {
      counts.page_aborts += 1;
      return null;
    }
    counts.network += 1;
    return failureEntry(d, 0, d.error);
  }

  return {
    answered, completed, errored,
    counts: () => Object.assign({ pending_error_answers: errorAnswers.size }, counts),
  };
}

/**
 * Report the failed non-fetch loads of every tab: `report(tabId, entry)` decides (tracking,
 * capture settings) and sends. Returns the decisions' counts reader, or null without webRequest.
 */
export function installLoadFailures(report) {
  if (!chrome.webRequest) return null;
  const filter = { urls: ['<all_urls>'] };
  const failures = createLoadFailures();
  const send = (d, entry) => { if (entry) report(d.tabId, entry); };
  chrome.webRequest.onResponseStarted.addListener((d) => { failures.answered(d); }, filter);
  chrome.webRequest.onCompleted.addListener((d) => send(d, failures.completed(d)), filter);
  chrome.webRequest.onErrorOccurred.addListener((d) => send(d, failures.errored(d)), filter);
  return failures.counts;
}
