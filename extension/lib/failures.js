// Gasoline — failed loads of a tracked tab that the page's own hooks cannot see.
//
// content/capture.js reports fetch and XHR failures from inside the page. An <img> or a script
// answered 404, a stylesheet blocked by the browser or an extension, a font or frame that never
// came: none of these go through fetch. chrome.webRequest sees every request of a tab whatever
// started it, with its status (onCompleted) or its network error (onErrorOccurred); each failure
// becomes a console-buffer entry of type "network" (what `observe errors` and `observe network`
// read), like the in-page ones. fetch/XHR requests (webRequest type "xmlhttprequest") are left to
// the page's hooks, which also see their bodies; so are requests the page aborted on purpose.

const ABORTED = 'net::ERR_ABORTED';

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
 * Report the failed non-fetch loads of every tab: `report(tabId, entry)` decides (tracking,
 * capture settings) and sends.
 */
export function installLoadFailures(report) {
  if (!chrome.webRequest) return false;
  const filter = { urls: ['<all_urls>'] };
  chrome.webRequest.onCompleted.addListener((d) => {
    if (d.tabId < 0 || d.statusCode < 400 || d.type === 'xmlhttprequest') return;
    report(d.tabId, failureEntry(d, d.statusCode, ''));
  }, filter);
  chrome.webRequest.onErrorOccurred.addListener((d) => {
    if (d.tabId < 0 || d.type === 'xmlhttprequest' || d.error === ABORTED) return;
    report(d.tabId, failureEntry(d, 0, d.error));
  }, filter);
  return true;
}
