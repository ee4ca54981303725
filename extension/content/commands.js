// Gasoline — content-side command handlers (isolated world).
//
// Defines globalThis.__gasolineCommands: pure DOM code with no chrome.* calls, so the service
// worker can run it in any tab (chrome.scripting.executeScript) and tests can load this file into
// an ordinary page and call it. It needs content/selectors.js loaded first, in the same world. Every handler returns a JSON-able object; failures come back as
// {error: <code>, message} instead of throwing.
(() => {
  'use strict';
  if (globalThis.__gasolineCommands) return;

  const TEXT_LIMIT = 2000;
  const HTML_LIMIT = 4000;

  const { clip, norm, roleOf, accessibleName, cssEscape, selectorsFor, sensitiveField } = globalThis.__gasolineSelectors;
  const REDACTED = '[redacted]';
  const fail = (error, message, extra) => Object.assign({ error, message }, extra || {});

  // The user-action capture (capture.js) lives in the page's world, which sees none of this world's
  // globals: it is told with two DOM events when an agent starts and stops acting, and skips what
  // happens in between.
  const agentActing = (on) => window.dispatchEvent(new Event(on ? '__gasoline_agent_acting__' : '__gasoline_agent_done__'));

  // ---------------------------------------------------------------- selector resolution
  const visible = (el) => {
    if (!el.isConnected) return false;
    const style = getComputedStyle(el);
    if (style.display === 'none' || style.visibility === 'hidden') return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 || r.height > 0;
  };

  const textMatch = (actual, wanted, exact) => {
    const a = norm(actual).toLowerCase();
    const w = norm(wanted).toLowerCase();
    return exact ? a === w : a.includes(w);
  };

  const unquote = (s) => {
    s = String(s).trim();
    if ((s.startsWith('"') && s.endsWith('"')) || (s.startsWith("'") && s.endsWith("'"))) return s.slice(1, -1);
    return s;
  };

  const allElements = (root) => Array.from((root || document).querySelectorAll('*'));

  const byText = (text) => {
    const wanted = unquote(text);
    const candidates = allElements().filter((el) => !['SCRIPT', 'STYLE', 'HEAD', 'TITLE', 'HTML', 'NOSCRIPT'].includes(el.tagName));
    for (const exact of [true, false]) {
      const hits = candidates.filter((el) => textMatch(el.innerText !== undefined ? el.innerText : el.textContent, wanted, exact)
        || (el.tagName === 'INPUT' && ['button', 'submit'].includes(el.type) && textMatch(el.value, wanted, exact)));
      // Keep the innermost matches (an element none of whose matching descendants also matched).
      const inner = hits.filter((el) => !hits.some((other) => other !== el && el.contains(other)));
      if (inner.length) return inner;
    }
    return [];
  };

  const byRole = (spec) => {
    // role=button, role=button[name="Save"], role=button name="Save"
    const m = String(spec).match(/^\s*([a-zA-Z-]+)\s*(?:\[\s*name\s*=\s*(.+?)\s*\]|\s+name\s*=\s*(.+))?\s*$/);
    if (!m) return [];
    const role = m[1].toLowerCase();
    const name = m[2] || m[3] ? unquote(m[2] || m[3]) : null;
    const hits = allElements().filter((el) => roleOf(el) === role);
    if (name === null) return hits;
    const exact = hits.filter((el) => textMatch(accessibleName(el), name, true));
    return exact.length ? exact : hits.filter((el) => textMatch(accessibleName(el), name, false));
  };

  const byAttr = (attr, value) => {
    const wanted = unquote(value);
    const hits = allElements().filter((el) => el.hasAttribute(attr));
    const exact = hits.filter((el) => el.getAttribute(attr) === wanted);
    return exact.length ? exact : hits.filter((el) => textMatch(el.getAttribute(attr), wanted, true));
  };

  const byLabel = (text) => {
    const wanted = unquote(text);
    const out = [];
    for (const label of document.querySelectorAll('label')) {
      if (textMatch(label.textContent, wanted, true) || textMatch(label.textContent, wanted, false)) {
        const control = label.control || label.querySelector('input,select,textarea');
        if (control && !out.includes(control)) out.push(control);
      }
    }
    for (const el of document.querySelectorAll('[aria-labelledby]')) {
      const name = accessibleName(el);
      if (textMatch(name, wanted, false) && !out.includes(el)) out.push(el);
    }
    return out;
  };

  const SEMANTIC = [
    ['text=', byText],
    ['role=', byRole],
    ['placeholder=', (v) => byAttr('placeholder', v)],
    ['aria-label=', (v) => byAttr('aria-label', v)],
    ['label=', byLabel],
  ];

  /** All elements matching a CSS or semantic selector, or the element of a snapshot ref
   * (`ref=e12`, content/snapshot.js); throws {error:"invalid_selector"} on bad CSS and
   * {error:"stale_ref"} for a ref of a page the tab has left. */
  const resolve = (selector) => {
    if (typeof selector !== 'string' || !selector.trim()) throw fail('missing_param', 'selector is required');
    const s = selector.trim();
    if (s.startsWith('ref=')) return [globalThis.__gasolineSnapshot.element(s.slice(4))];
    for (const [prefix, fn] of SEMANTIC) {
      if (s.startsWith(prefix)) return fn(s.slice(prefix.length));
    }
    try {
      return Array.from(document.querySelectorAll(s));
    } catch (e) {
      throw fail('invalid_selector', 'not a valid CSS or semantic selector: ' + s);
    }
  };

  const resolveOne = (selector) => {
    const all = resolve(selector);
    if (!all.length) throw fail('element_not_found', 'no element matches ' + selector, { selector });
    return all.find(visible) || all[0];
  };

  const rect = (el) => {
    const r = el.getBoundingClientRect();
    return { x: Math.round(r.x), y: Math.round(r.y), width: Math.round(r.width), height: Math.round(r.height) };
  };

  const describe = (el, opts) => {
    const attrs = {};
    for (const a of Array.from(el.attributes).slice(0, 30)) attrs[a.name] = clip(a.value, 300);
    const out = {
      tag: el.tagName.toLowerCase(),
      id: el.id || undefined,
      classes: Array.from(el.classList),
      text: clip(norm(el.innerText !== undefined ? el.innerText : el.textContent), TEXT_LIMIT),
      attributes: attrs,
      visible: visible(el),
      rect: rect(el),
      selectors: selectorsFor(el),
    };
    if ('value' in el && el.tagName !== 'BUTTON' && el.tagName !== 'LI') out.value = sensitiveField(el) ? REDACTED : clip(el.value, 500);
    if (opts && opts.html !== false) out.html = clip(el.outerHTML, HTML_LIMIT);
    if (opts && opts.children) out.child_count = el.children.length;
    return out;
  };

  // ---------------------------------------------------------------- handlers
  const dom = (params) => {
    const selector = params.selector || 'body';
    const limit = Math.max(1, Math.min(Number(params.limit) || 50, 500));
    const all = resolve(selector);
    return {
      url: location.href,
      title: document.title,
      selector,
      count: all.length,
      matches: all.slice(0, limit).map((el) => describe(el, { html: params.include_html !== false, children: true })),
      truncated: all.length > limit,
    };
  };

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // By tag name, not instanceof: an element of a same-origin iframe (reached by a ref) belongs to
  // another realm, whose constructors are not this world's.
  const setNativeValue = (el, value) => {
    const proto = el.tagName === 'TEXTAREA' ? HTMLTextAreaElement.prototype
      : el.tagName === 'SELECT' ? HTMLSelectElement.prototype : HTMLInputElement.prototype;
    const desc = Object.getOwnPropertyDescriptor(proto, 'value');
    if (desc && desc.set) desc.set.call(el, value); else el.value = value;
  };

  const fire = (el, type, init) => el.dispatchEvent(new Event(type, Object.assign({ bubbles: true, cancelable: true }, init || {})));

  const keyEvent = (el, key, type) => el.dispatchEvent(new KeyboardEvent(type, { key, code: key.length === 1 ? 'Key' + key.toUpperCase() : key, bubbles: true, cancelable: true }));

  const listInteractive = (params) => {
    const sel = 'a[href],button,input:not([type=hidden]),select,textarea,[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem],[contenteditable=""],[contenteditable=true],[tabindex]:not([tabindex="-1"])';
    const limit = Math.max(1, Math.min(Number(params.limit) || 100, 500));
    // A page of the list: the daemon asks for the next one with offset (its next_offset).
    const offset = Math.max(0, Math.floor(Number(params.offset) || 0));
    const els = Array.from(document.querySelectorAll(sel)).filter(visible);
    return {
      url: location.href,
      count: els.length,
      offset,
      elements: els.slice(offset, offset + limit).map((el, i) => {
        const s = selectorsFor(el);
        const id = 'e' + (offset + i + 1);
        return { element_id: id, tag: s.tag, role: s.role ? s.role.role : null, name: s.role ? s.role.name : '', selector: s.testId ? '[data-testid="' + s.testId + '"]' : s.css, type: el.type || undefined, rect: rect(el) };
      }),
    };
  };

  const fieldNature = (el) => {
    const tag = el.tagName;
    if (tag !== 'INPUT' && tag !== 'TEXTAREA' && tag !== 'SELECT' && !el.isContentEditable) return {};
    return {
      input_type: String(el.type || (el.isContentEditable ? 'contenteditable' : 'text')).slice(0, 200),
      input_name: String(el.getAttribute('name') || '').slice(0, 200),
      input_id: String(el.id || '').slice(0, 200),
      autocomplete: String(el.getAttribute('autocomplete') || '').slice(0, 200),
    };
  };

  const domAction = async (params) => {
    const action = params.action;
    if (!action) return fail('missing_param', 'action is required');
    if (action === 'list_interactive') return listInteractive(params);
    if (action === 'wait_for') {
      const timeout = Math.min(Number(params.timeout_ms) || 5000, 15000);
      const deadline = Date.now() + timeout;
      for (;;) {
        const found = resolve(params.selector).filter(visible);
        if (found.length) return { success: true, action, selector: params.selector, count: found.length, element: describe(found[0], { html: false }) };
        if (Date.now() > deadline) return fail('timeout', 'no visible element matched ' + params.selector + ' within ' + timeout + ' ms', { selector: params.selector });
        await sleep(100);
      }
    }
    const el = resolveOne(params.selector);
    // The element's nature (type, name, id, autocomplete) goes with the result: the daemon
    // records the agent's action with it and decides, by the same rule as for the user's
    // (lib/redact.js isSensitiveField), whether the typed value is kept.
    const done = (extra) => Object.assign({ success: true, action, selector: params.selector, element: Object.assign({ tag: el.tagName.toLowerCase(), selectors: selectorsFor(el) }, fieldNature(el)) }, extra || {});
    switch (action) {
      case 'click': {
        el.scrollIntoView({ block: 'center', inline: 'center' });
        if (typeof el.focus === 'function') el.focus({ preventScroll: true });
        el.click();
        return done();
      }
      case 'type': {
        const text = String(params.text !== undefined ? params.text : params.value !== undefined ? params.value : '');
        el.focus();
        if (el.isContentEditable) {
          if (params.clear !== false) el.textContent = '';
          el.textContent += text;
          fire(el, 'input');
        } else {
          const base = params.clear === false ? String(el.value || '') : '';
          setNativeValue(el, base + text);
          fire(el, 'input');
          fire(el, 'change');
        }
        return done({ typed_length: text.length });
      }
      case 'select': {
        if (el.tagName !== 'SELECT') return fail('invalid_param', 'element is not a <select>', { selector: params.selector });
        const wanted = String(params.value !== undefined ? params.value : params.text);
        const opt = Array.from(el.options).find((o) => o.value === wanted) || Array.from(el.options).find((o) => norm(o.text) === norm(wanted));
        if (!opt) return fail('option_not_found', 'no option ' + wanted, { options: Array.from(el.options).map((o) => o.value).slice(0, 50) });
        setNativeValue(el, opt.value);
        fire(el, 'input');
        fire(el, 'change');
        return done({ value: opt.value });
      }
      case 'check':
      case 'uncheck': {
        const want = action === 'check' ? (params.checked !== false) : false;
        if (el.checked !== want) el.click();
        return done({ checked: !!el.checked });
      }
      case 'focus':
        el.focus();
        return done({ focused: document.activeElement === el });
      case 'scroll_to':
        el.scrollIntoView({ block: 'center', behavior: 'instant' });
        return done({ scroll_y: Math.round(window.scrollY) });
      case 'key_press': {
        const key = String(params.key || params.text || 'Enter');
        keyEvent(el, key, 'keydown');
        keyEvent(el, key, 'keypress');
        keyEvent(el, key, 'keyup');
        if (key === 'Enter' && el.form && el.tagName === 'INPUT') {
          if (typeof el.form.requestSubmit === 'function') el.form.requestSubmit(); else el.form.submit();
        }
        return done({ key });
      }
      case 'get_text':
        return done({ text: clip(norm(el.innerText !== undefined ? el.innerText : el.textContent), 20000) });
      case 'get_value':
        return done({ value: sensitiveField(el) ? REDACTED : (el.value !== undefined ? String(el.value) : null) });
      case 'get_attribute':
        if (!params.name) return fail('missing_param', 'name is required');
        return done({ name: params.name, value: el.getAttribute(params.name) });
      case 'set_attribute':
        if (!params.name) return fail('missing_param', 'name is required');
        el.setAttribute(params.name, String(params.value == null ? '' : params.value));
        return done({ name: params.name, value: el.getAttribute(params.name) });
      case 'paste': {
        const text = String(params.text || '');
        el.focus();
        const dt = new DataTransfer();
        dt.setData('text/plain', text);
        const ok = el.dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
        if (ok && 'value' in el) { setNativeValue(el, String(el.value || '') + text); fire(el, 'input'); }
        return done();
      }
      case 'upload': {
        if (el.tagName !== 'INPUT' || el.type !== 'file') return fail('invalid_param', 'element is not an <input type=file>', { selector: params.selector });
        const files = Array.isArray(params.files) ? params.files : [];
        if (!files.length) return fail('missing_param', 'files is required');
        if (files.length > 1 && !el.multiple) return fail('invalid_param', 'the input takes one file (it has no multiple attribute)', { selector: params.selector });
        if (el.disabled) return fail('invalid_param', 'the file input is disabled', { selector: params.selector });
        const dt = new DataTransfer();
        for (const f of files) {
          let bin;
          try { bin = atob(String(f.data || '')); } catch (_) { return fail('invalid_param', 'file data is not base64: ' + f.name); }
          const bytes = new Uint8Array(bin.length);
          for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
          dt.items.add(new File([bytes], String(f.name || 'file'), { type: String(f.type || 'application/octet-stream'), lastModified: Date.now() }));
        }
        el.files = dt.files;
        fire(el, 'input');
        fire(el, 'change');
        return done({ files: Array.from(el.files).map((f) => ({ name: f.name, size: f.size, type: f.type })) });
      }
      default:
        return fail('unknown_action', 'unknown dom_action ' + action);
    }
  };

  const OVERLAY_ATTR = 'data-gasoline-overlay';

  const highlight = (params) => {
    const el = resolveOne(params.selector);
    const r = el.getBoundingClientRect();
    const box = document.createElement('div');
    box.setAttribute(OVERLAY_ATTR, 'highlight');
    Object.assign(box.style, {
      position: 'fixed', left: r.left - 2 + 'px', top: r.top - 2 + 'px', width: r.width + 4 + 'px', height: r.height + 4 + 'px',
      border: '3px solid #f28c28', background: 'rgba(242,140,40,0.15)', zIndex: 2147483647, pointerEvents: 'none', borderRadius: '3px',
    });
    document.documentElement.appendChild(box);
    const duration = Math.min(Math.max(Number(params.duration_ms) || 3000, 100), 60000);
    setTimeout(() => box.remove(), duration);
    return { success: true, selector: params.selector, bounds: rect(el), duration_ms: duration };
  };

  const subtitle = (params) => {
    let bar = document.querySelector('[' + OVERLAY_ATTR + '="subtitle"]');
    const text = String(params.text || '');
    if (!text) {
      if (bar) bar.remove();
      return { success: true, cleared: true };
    }
    if (!bar) {
      bar = document.createElement('div');
      bar.setAttribute(OVERLAY_ATTR, 'subtitle');
      Object.assign(bar.style, {
        position: 'fixed', left: '50%', bottom: '24px', transform: 'translateX(-50%)', maxWidth: '80%',
        background: 'rgba(0,0,0,0.8)', color: '#fff', font: '16px/1.4 sans-serif', padding: '8px 16px',
        borderRadius: '6px', zIndex: 2147483647, pointerEvents: 'none', textAlign: 'center',
      });
      document.documentElement.appendChild(bar);
    }
    bar.textContent = clip(text, 500);
    clearTimeout(globalThis.__gasolineSubtitleTimer);
    if (params.duration_ms) globalThis.__gasolineSubtitleTimer = setTimeout(() => bar.remove(), Math.min(Number(params.duration_ms), 600000));
    return { success: true, text: bar.textContent };
  };

  // ---------------------------------------------------------------- draw mode (annotations)
  // An overlay over the page: the user drags a rectangle, types a note, Enter saves it (Esc in the
  // note drops that rectangle; Esc otherwise ends draw mode). Each saved annotation records the
  // element under the rectangle's centre. Annotations go to globalThis.__gasolineAnnotationSink
  // when the worker installed one, and are kept in __gasolineAnnotationsHere for this page.
  const ANNOTATION_STYLES = ['display', 'position', 'color', 'background-color', 'font-size', 'font-family', 'font-weight',
    'width', 'height', 'margin', 'padding', 'border', 'opacity', 'z-index', 'visibility', 'overflow'];

  const elementDetail = (el) => {
    if (!el || el.nodeType !== 1) return null;
    const cs = getComputedStyle(el);
    const styles = {};
    for (const p of ANNOTATION_STYLES) styles[p] = cs.getPropertyValue(p);
    const attrs = {};
    for (const a of Array.from(el.attributes).slice(0, 30)) attrs[a.name] = clip(a.value, 300);
    return {
      tag: el.tagName.toLowerCase(),
      selectors: selectorsFor(el),
      text: clip(norm(el.innerText !== undefined ? el.innerText : el.textContent), 300),
      rect: rect(el),
      attributes: attrs,
      outer_html: clip(el.outerHTML, HTML_LIMIT),
      styles,
    };
  };

  const drawMode = (params) => {
    const existing = document.querySelector('[' + OVERLAY_ATTR + '="draw"]');
    if (params.action === 'stop') {
      if (existing) existing.__gasolineEnd();
      return { success: true, active: false };
    }
    if (existing) return { success: true, active: true, already_active: true };
    // The page must not be able to write a note that agents read as the user's: the overlay lives
    // in a CLOSED shadow root (the page sees only the host element, never the note field), and only
    // trusted events (the user's real mouse and keyboard) draw, type or save.
    const layer = document.createElement('div');
    layer.setAttribute(OVERLAY_ATTR, 'draw');
    Object.assign(layer.style, { position: 'fixed', inset: '0', zIndex: 2147483646 });
    const surface = document.createElement('div');
    Object.assign(surface.style, { position: 'absolute', inset: '0', cursor: 'crosshair', background: 'rgba(0,0,0,0.04)' });
    layer.attachShadow({ mode: 'closed' }).appendChild(surface);
    const banner = document.createElement('div');
    banner.textContent = 'Gasoline draw mode: drag over an area, type a note, Enter saves. Esc ends.';
    Object.assign(banner.style, { position: 'fixed', top: '8px', left: '50%', transform: 'translateX(-50%)', background: 'rgba(0,0,0,0.8)', color: '#fff', font: '13px/1.4 sans-serif', padding: '6px 12px', borderRadius: '6px', pointerEvents: 'none' });
    surface.appendChild(banner);
    let start = null;
    let box = null;
    let note = null;
    const boxStyle = (x, y, w, h) => Object.assign(box.style, { left: x + 'px', top: y + 'px', width: w + 'px', height: h + 'px' });
    // While the overlay covers the page the user's clicks and typing go to it, not to the page:
    // they must not be recorded as page actions.
    agentActing(true);
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      agentActing(false);
      window.removeEventListener('keydown', onKey, true);
      layer.remove();
    };
    layer.__gasolineEnd = end;
    const save = (r, text) => {
      const cx = r.x + r.width / 2;
      const cy = r.y + r.height / 2;
      layer.style.display = 'none';
      const under = document.elementFromPoint(cx, cy);
      layer.style.display = '';
      const annotation = {
        id: 'ann_' + Date.now().toString(36) + '_' + Math.random().toString(36).slice(2, 8),
        note: clip(text, 2000),
        rect: r,
        url: location.href,
        title: document.title,
        timestamp: Date.now(),
        viewport: { width: window.innerWidth, height: window.innerHeight },
        scroll: { x: Math.round(window.scrollX), y: Math.round(window.scrollY) },
        element: elementDetail(under),
      };
      const here = globalThis.__gasolineAnnotationsHere || (globalThis.__gasolineAnnotationsHere = []);
      here.push(annotation);
      if (here.length > 200) here.shift();
      if (typeof globalThis.__gasolineAnnotationSink === 'function') globalThis.__gasolineAnnotationSink(annotation);
      return annotation;
    };
    const onKey = (e) => {
      if (!e.isTrusted) return;
      if (e.key === 'Escape' && !note) { e.preventDefault(); e.stopPropagation(); end(); }
    };
    surface.addEventListener('mousedown', (e) => {
      if (!e.isTrusted || note || e.button !== 0 || e.target !== surface) return;
      e.preventDefault();
      start = { x: e.clientX, y: e.clientY };
      box = document.createElement('div');
      Object.assign(box.style, { position: 'fixed', border: '2px solid #f28c28', background: 'rgba(242,140,40,0.15)', pointerEvents: 'none' });
      boxStyle(start.x, start.y, 0, 0);
      surface.appendChild(box);
    });
    surface.addEventListener('mousemove', (e) => {
      if (!e.isTrusted || !start || !box) return;
      boxStyle(Math.min(start.x, e.clientX), Math.min(start.y, e.clientY), Math.abs(e.clientX - start.x), Math.abs(e.clientY - start.y));
    });
    surface.addEventListener('mouseup', (e) => {
      if (!e.isTrusted || !start || !box) return;
      const r = { x: Math.round(Math.min(start.x, e.clientX)), y: Math.round(Math.min(start.y, e.clientY)), width: Math.round(Math.abs(e.clientX - start.x)), height: Math.round(Math.abs(e.clientY - start.y)) };
      start = null;
      if (r.width < 4 || r.height < 4) { box.remove(); box = null; return; }
      const drawn = box;
      box = null;
      note = document.createElement('input');
      note.type = 'text';
      note.placeholder = 'Note for the agent (Enter saves, Esc drops)';
      note.setAttribute(OVERLAY_ATTR, 'draw-note');
      Object.assign(note.style, { position: 'fixed', left: r.x + 'px', top: Math.min(r.y + r.height + 4, window.innerHeight - 32) + 'px', width: Math.max(220, r.width) + 'px', font: '13px sans-serif', padding: '4px', zIndex: 2147483647 });
      surface.appendChild(note);
      layer.setAttribute('data-gasoline-state', 'note'); // tests wait for it; the field itself stays hidden
      const closeNote = () => { note.remove(); note = null; layer.removeAttribute('data-gasoline-state'); };
      note.addEventListener('keydown', (k) => {
        k.stopPropagation();
        if (!k.isTrusted) return;
        if (k.key === 'Enter') {
          k.preventDefault();
          const text = note.value;
          closeNote();
          const saved = save(r, text);
          const label = document.createElement('div');
          label.textContent = clip(text, 80);
          Object.assign(label.style, { position: 'absolute', left: '0', top: '-18px', background: '#f28c28', color: '#fff', font: '11px sans-serif', padding: '1px 4px', whiteSpace: 'nowrap' });
          drawn.appendChild(label);
          drawn.setAttribute('data-annotation-id', saved.id);
          layer.setAttribute('data-gasoline-annotations', String(surface.querySelectorAll('[data-annotation-id]').length));
        } else if (k.key === 'Escape') {
          k.preventDefault();
          closeNote();
          drawn.remove();
        }
      });
      note.focus();
    });
    window.addEventListener('keydown', onKey, true);
    document.documentElement.appendChild(layer);
    return { success: true, active: true };
  };

  const pageInfo = () => ({
    url: location.href,
    title: document.title,
    ready_state: document.readyState,
    referrer: document.referrer,
    language: document.documentElement.lang || '',
    viewport: { width: window.innerWidth, height: window.innerHeight },
    scroll: { x: Math.round(window.scrollX), y: Math.round(window.scrollY) },
    document_size: { width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight },
    element_count: document.getElementsByTagName('*').length,
    forms: document.forms.length,
    links: document.links.length,
    images: document.images.length,
    headings: Array.from(document.querySelectorAll('h1,h2,h3')).slice(0, 20).map((h) => ({ level: Number(h.tagName[1]), text: clip(norm(h.textContent), 200) })),
  });

  const storageDump = (store) => {
    const out = {};
    try {
      for (let i = 0; i < store.length && i < 200; i++) {
        const k = store.key(i);
        out[k] = clip(store.getItem(k), 4000);
      }
    } catch (_) { /* storage blocked */ }
    return out;
  };

  const stateCapture = () => {
    const forms = Array.from(document.querySelectorAll('input,select,textarea')).slice(0, 200)
      .filter((el) => el.type !== 'hidden' && el.type !== 'file')
      .map((el) => ({ selector: selectorsFor(el).css,
        value: el.type === 'checkbox' || el.type === 'radio' ? String(el.checked) : sensitiveField(el) ? REDACTED : clip(el.value, 2000) }));
    return {
      url: location.href,
      title: document.title,
      local_storage: storageDump(window.localStorage),
      session_storage: storageDump(window.sessionStorage),
      cookie_names: document.cookie ? document.cookie.split(';').map((c) => c.split('=')[0].trim()).filter(Boolean) : [],
      scroll: { x: Math.round(window.scrollX), y: Math.round(window.scrollY) },
      form_values: forms,
      captured_at: new Date().toISOString(),
    };
  };

  const waterfall = (params) => {
    const limit = Math.max(1, Math.min(Number(params.limit) || 500, 2000));
    const entries = performance.getEntriesByType('resource').slice(-limit).map((r) => ({
      name: r.name, url: r.name, initiator_type: r.initiatorType, duration: Math.round(r.duration * 10) / 10,
      start_time: Math.round(r.startTime * 10) / 10, fetch_start: Math.round(r.fetchStart * 10) / 10,
      response_end: Math.round(r.responseEnd * 10) / 10, transfer_size: r.transferSize || 0,
      decoded_body_size: r.decodedBodySize || 0, encoded_body_size: r.encodedBodySize || 0, page_url: location.href,
      status: r.responseStatus > 0 ? r.responseStatus : null, // 0: not exposed (cross-origin without Timing-Allow-Origin)
    }));
    return { page_url: location.href, count: entries.length, entries };
  };

  const computedStyles = (params) => {
    const el = resolveOne(params.selector);
    const cs = getComputedStyle(el);
    const props = Array.isArray(params.properties) && params.properties.length ? params.properties
      : ['display', 'visibility', 'position', 'color', 'background-color', 'font-size', 'font-family', 'font-weight', 'width', 'height', 'margin', 'padding', 'border', 'opacity', 'z-index', 'overflow'];
    const styles = {};
    for (const p of props.slice(0, 100)) styles[p] = cs.getPropertyValue(p);
    return { selector: params.selector, styles, rect: rect(el) };
  };

  const formDiscovery = () => ({
    url: location.href,
    forms: Array.from(document.forms).slice(0, 50).map((f) => ({
      selector: selectorsFor(f).css, action: f.action, method: (f.method || 'get').toLowerCase(),
      fields: Array.from(f.elements).slice(0, 100).map((el) => ({
        tag: el.tagName.toLowerCase(), type: el.type || '', name: el.name || '', label: accessibleName(el),
        required: !!el.required, selector: selectorsFor(el).css,
      })),
    })),
  });

  const a11y = async (params) => {
    if (!globalThis.axe) return fail('axe_unavailable', 'axe-core is not loaded in this page');
    const context = params.selector ? resolve(params.selector) : document;
    const options = { resultTypes: ['violations'] };
    if (Array.isArray(params.tags) && params.tags.length) options.runOnly = { type: 'tag', values: params.tags };
    else if (Array.isArray(params.rules) && params.rules.length) options.runOnly = { type: 'rule', values: params.rules };
    const res = await globalThis.axe.run(context, options);
    const nodeLimit = Math.max(1, Math.min(Number(params.node_limit) || 20, 200));
    return {
      url: location.href,
      engine: 'axe-core ' + (globalThis.axe.version || ''),
      violations: res.violations.map((v) => ({
        id: v.id, impact: v.impact, help: v.help, help_url: v.helpUrl, description: v.description, tags: v.tags,
        node_count: v.nodes.length,
        nodes: v.nodes.slice(0, nodeLimit).map((n) => ({ target: n.target, html: clip(n.html, 500), failure_summary: clip(n.failureSummary, 1000), impact: n.impact })),
      })),
      summary: { violations: res.violations.length, passes: (res.passes || []).length, incomplete: (res.incomplete || []).length },
    };
  };

  // While an agent's dom_action runs, the events it fires are not the user's (the daemon records
  // the action once, with source:"ai" and the asking client).
  const asAgent = async (params) => {
    agentActing(true);
    try {
      return await domAction(params);
    } finally {
      agentActing(false);
    }
  };

  // The agents' page snapshot (content/snapshot.js); `selector` (or `ref=`) takes a subtree.
  const snapshot = (params) => globalThis.__gasolineSnapshot.snapshot(params.selector ? resolveOne(params.selector) : null);

  // Where the worker's real input (worker/devtools.js: hover, drag, key_press) lands: the target
  // resolved like every other command's, scrolled into view, its centre in viewport coordinates
  // (and, for a drag, the drop target's too). `acting` marks the agent as acting until the worker
  // sends agent_acting {on:false}.
  const centre = (el) => {
    const r = el.getBoundingClientRect();
    return { x: Math.round(r.left + r.width / 2), y: Math.round(r.top + r.height / 2) };
  };
  const point = (params) => {
    const el = resolveOne(params.selector);
    const to = params.action === 'drag' ? resolveOne(params.target) : null;
    el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
    if (to && !visibleInViewport(to)) to.scrollIntoView({ block: 'nearest', inline: 'nearest', behavior: 'instant' });
    if (params.focus && typeof el.focus === 'function') el.focus({ preventScroll: true });
    if (params.acting) agentActing(true);
    const at = centre(el);
    const element = Object.assign({ tag: el.tagName.toLowerCase(), selectors: selectorsFor(el) }, fieldNature(el));
    const out = Object.assign({ element, rect: rect(el) }, at);
    // Real input lands on whatever is on top at that point: say when it is not the element.
    const hit = document.elementFromPoint(at.x, at.y);
    if (hit && hit !== el && !el.contains(hit)) out.obscured_by = { tag: hit.tagName.toLowerCase(), selectors: selectorsFor(hit) };
    if (to) out.to = Object.assign({ element: { tag: to.tagName.toLowerCase(), selectors: selectorsFor(to) } }, centre(to));
    return out;
  };
  const visibleInViewport = (el) => {
    const r = el.getBoundingClientRect();
    return r.bottom > 0 && r.right > 0 && r.top < window.innerHeight && r.left < window.innerWidth;
  };

  const HANDLERS = {
    snapshot,
    dom, dom_action: asAgent, highlight, subtitle, page_info: pageInfo, state_capture: stateCapture,
    waterfall, computed_styles: computedStyles, form_discovery: formDiscovery, a11y,
    draw_mode: drawMode, point, agent_acting: (params) => { agentActing(!!params.on); return { success: true }; },
  };

  /** Run one command; never throws. */
  const run = async (type, params) => {
    const handler = HANDLERS[type];
    if (!handler) return { error: 'unknown_query_type', message: 'unknown command type ' + type };
    try {
      return await handler(params || {});
    } catch (e) {
      if (e && e.error) return e;
      return fail('command_failed', String((e && e.message) || e));
    }
  };

  Object.defineProperty(globalThis, '__gasolineCommands', {
    value: Object.freeze({ run, resolve, selectorsFor, accessibleName, roleOf, types: Object.keys(HANDLERS) }),
    enumerable: false,
  });
})();
