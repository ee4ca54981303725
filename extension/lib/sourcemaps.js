// Gasoline — source-mapped stack frames for the page's exceptions (docs/extension.md, "Source
// maps"). A captured exception's stack names the bundle the browser ran (`app.min.js:1:48213`);
// where the page ships a source map (`//# sourceMappingURL=` at the end of the script, a file or a
// data: URL), each frame is mapped back to the source file, line, column and name.
//
// * Only scripts of the page's own origin are fetched (no credentials), at most MAX_SCRIPT_BYTES
//   and MAX_MAP_BYTES each; the last MAX_CACHED maps (or their absence) are kept per script URL.
// * Pure code but for the injected `fetchText` (tests/js/sourcemaps.test.mjs fakes it).

export const MAX_SCRIPT_BYTES = 5 * 1024 * 1024;
export const MAX_MAP_BYTES = 10 * 1024 * 1024;
export const MAX_CACHED = 20;
export const MAX_FRAMES = 20;

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_VALUE = new Map([...B64].map((c, i) => [c, i]));

/** Decodes a source map's `mappings` into lines of [genCol, source, line, col, name?] (absolute, 0-based). */
export function decodeMappings(mappings) {
  const lines = [];
  let source = 0, line = 0, col = 0, name = 0;
  for (const text of String(mappings).split(';')) {
    const segments = [];
    let genCol = 0;
    for (const seg of text.split(',')) {
      if (!seg) continue;
      const values = [];
      let value = 0, shift = 0;
      for (const c of seg) {
        const digit = B64_VALUE.get(c);
        if (digit === undefined) throw new Error('bad mappings');
        value += (digit & 31) << shift;
        if (digit & 32) { shift += 5; continue; }
        values.push(value & 1 ? -(value >>> 1) : value >>> 1);
        value = 0; shift = 0;
      }
      genCol += values[0];
      if (values.length >= 4) {
        source += values[1]; line += values[2]; col += values[3];
        if (values.length >= 5) { name += values[4]; segments.push([genCol, source, line, col, name]); } else segments.push([genCol, source, line, col]);
      }
    }
    lines.push(segments);
  }
  return lines;
}

/** The original position of generated (line, column), both 1-based, or null. */
export function lookup(map, line, column) {
  const segments = map.lines[line - 1];
  if (!segments || !segments.length) return null;
  let lo = 0, hi = segments.length - 1, found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (segments[mid][0] <= column - 1) { found = mid; lo = mid + 1; } else hi = mid - 1;
  }
  if (found < 0) return null;
  const [, src, srcLine, srcCol, name] = segments[found];
  const source = map.sources[src];
  if (typeof source !== 'string') return null;
  return { source, line: srcLine + 1, column: srcCol + 1, name: name !== undefined && typeof map.names[name] === 'string' ? map.names[name] : null };
}

/** Parsed frames of a V8 stack: [{fn, url, line, column}]. */
export function parseFrames(stack) {
  const out = [];
  for (const text of String(stack || '').split('\n')) {
    const m = /^\s*at (?:(.*?) \()?((?:https?|file):\/\/[^\s()]+?):(\d+):(\d+)\)?\s*$/.exec(text);
    if (m) out.push({ fn: m[1] || null, url: m[2], line: Number(m[3]), column: Number(m[4]) });
    if (out.length >= MAX_FRAMES) break;
  }
  return out;
}

function parseMap(text, mapUrl) {
  const raw = JSON.parse(text);
  if (!raw || raw.version !== 3 || typeof raw.mappings !== 'string' || !Array.isArray(raw.sources)) return null;
  const root = typeof raw.sourceRoot === 'string' && raw.sourceRoot ? raw.sourceRoot.replace(/\/?$/, '/') : '';
  const sources = raw.sources.map((s) => {
    if (typeof s !== 'string') return null;
    const joined = root + s;
    // Keep a source's own name (webpack://app/src/x.ts, src/x.ts); resolve only plain relative paths against the map.
    if (/^[a-z][a-z0-9+.-]*:/i.test(joined) || joined.startsWith('/')) return joined;
    try { return new URL(joined, mapUrl).href; } catch (_) { return joined; }
  });
  return { sources, names: Array.isArray(raw.names) ? raw.names : [], lines: decodeMappings(raw.mappings) };
}

function decodeDataUrl(url) {
  const m = /^data:application\/json(?:;charset=[^;,]+)?(;base64)?,(.*)$/is.exec(url);
  if (!m) return null;
  if (!m[1]) return decodeURIComponent(m[2]);
  const bin = atob(m[2]);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  return new TextDecoder().decode(bytes);
}

/**
 * A source-map resolver. `fetchText(url, maxBytes)` resolves to the text at `url` (or null: not
 * there, too large, not allowed).
 */
export function createSourceMapper({ fetchText }) {
  const cache = new Map();  // script URL -> Promise<map | null>

  async function load(scriptUrl) {
    const script = await fetchText(scriptUrl, MAX_SCRIPT_BYTES);
    if (typeof script !== 'string') return null;
    const tail = script.slice(-4096);
    const m = /\/\/[#@]\s*sourceMappingURL=(\S+)\s*$/.exec(tail.trimEnd()) || /\/\/[#@]\s*sourceMappingURL=(\S+)/.exec(tail);
    if (!m) return null;
    const ref = m[1];
    if (/^data:/i.test(ref)) return parseMap(decodeDataUrl(ref), scriptUrl);
    let mapUrl;
    try { mapUrl = new URL(ref, scriptUrl).href; } catch (_) { return null; }
    if (new URL(mapUrl).origin !== new URL(scriptUrl).origin) return null;
    const text = await fetchText(mapUrl, MAX_MAP_BYTES);
    return typeof text === 'string' ? parseMap(text, mapUrl) : null;
  }

  function mapFor(scriptUrl) {
    if (cache.has(scriptUrl)) {
      const hit = cache.get(scriptUrl);
      cache.delete(scriptUrl);
      cache.set(scriptUrl, hit);
      return hit;
    }
    const p = load(scriptUrl).catch(() => null);
    cache.set(scriptUrl, p);
    while (cache.size > MAX_CACHED) cache.delete(cache.keys().next().value);
    return p;
  }

  /**
   * The frames of `stack` with their original positions (`source`, `source_line`,
   * `source_column`, `name`) where the script of `pageUrl`'s origin has a map; null when no frame
   * could be mapped.
   */
  async function mapStack(stack, pageUrl) {
    let origin;
    try { origin = new URL(pageUrl).origin; } catch (_) { return null; }
    const frames = parseFrames(stack);
    let mapped = 0;
    const out = [];
    for (const f of frames) {
      const frame = { function: f.fn, url: f.url, line: f.line, column: f.column };
      let sameOrigin = false;
      try { sameOrigin = new URL(f.url).origin === origin; } catch (_) { /* not a URL */ }
      const map = sameOrigin ? await mapFor(f.url) : null;
      const pos = map ? lookup(map, f.line, f.column) : null;
      if (pos) {
        mapped += 1;
        Object.assign(frame, { source: pos.source, source_line: pos.line, source_column: pos.column });
        if (pos.name) frame.name = pos.name;
      }
      out.push(frame);
    }
    return mapped ? out : null;
  }

  return { mapStack };
}
