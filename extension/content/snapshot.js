// Gasoline — the page snapshot for agents: the accessibility tree as compact text, with refs.
//
// Loaded into the isolated world after content/selectors.js and before content/commands.js (the
// worker injects the three together). Pure DOM code, no chrome.* calls. Defines
// globalThis.__gasolineSnapshot:
//
//   snapshot(root?) -> {document, url, title, nodes, capped, tree}
//     `tree` is one node per line, two spaces of indentation per level:
//       - heading "Orders" [level=2] [ref=e3]
//       - button "Sign in" [disabled] [ref=e12]
//       - textbox "Email" [focused] [ref=e13]: ada@example.com
//       - text: Total due
//     Roles and names follow a subset of the ARIA / HTML-AAM rules (implicit roles of common
//     elements; names from aria-labelledby, aria-label, <label>, alt, legend / caption / figcaption,
//     the content for roles named from content, title, placeholder). The walk enters same-origin
//     iframes and open shadow roots (slotted content where it is rendered) and skips what is not
//     rendered (display:none, visibility:hidden, aria-hidden, <template>, scripts). The budget
//     (nodes, bytes, offset) is applied by the daemon, which gets the whole tree.
//   element(ref) -> the element of a ref (throws {error} when unknown, stale or removed)
//
// Refs ("e12") are stable for the document's life: an element keeps its ref across snapshots (a
// WeakMap). The isolated world lives as long as the document, so a navigation or reload starts
// with no refs and a new document id; a ref written "e12@<document id>" (the daemon appends the
// document of the agent's last snapshot) is refused with `stale_ref` on any other document.
(() => {
  'use strict';
  if (globalThis.__gasolineSnapshot) return;

  const { clip, norm, sensitiveField } = globalThis.__gasolineSelectors;
  const fail = (error, message, extra) => Object.assign({ error, message }, extra || {});

  const DOCUMENT_ID = Math.random().toString(36).slice(2, 8) + Date.now().toString(36).slice(-3);
  /** The hardest cap on one walk (the daemon cuts far below it by default). */
  const MAX_NODES = 20000;
  const NAME_LIMIT = 150;
  const VALUE_LIMIT = 150;
  const TEXT_LIMIT = 300;

  const refOf = new WeakMap(); // element -> "e12"
  const elementOf = new Map(); // "e12" -> WeakRef(element)
  let issued = 0;

  const refFor = (el) => {
    let ref = refOf.get(el);
    if (!ref) {
      // A long-lived page that keeps replacing its content (an infinite list) leaves refs of
      // collected elements behind: forget those now and then.
      if (elementOf.size >= 20000 && issued % 5000 === 0) {
        for (const [r, weak] of elementOf) if (!weak.deref()) elementOf.delete(r);
      }
      issued += 1;
      ref = 'e' + issued;
      refOf.set(el, ref);
      elementOf.set(ref, new WeakRef(el));
    }
    return ref;
  };

  // ---------------------------------------------------------------- roles
  const TEXTBOX_INPUTS = new Set(['text', 'email', 'tel', 'url', 'password', '']);
  const INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', checkbox: 'checkbox', radio: 'radio',
    range: 'slider', number: 'spinbutton', search: 'searchbox', color: 'button', file: 'button', hidden: null,
  };
  const HEADING = /^H[1-6]$/;
  const named = (el) => el.hasAttribute('aria-label') || el.hasAttribute('aria-labelledby') || el.hasAttribute('title');
  const IMPLICIT = {
    A: (el) => (el.hasAttribute('href') ? 'link' : null),
    AREA: (el) => (el.hasAttribute('href') ? 'link' : null),
    ARTICLE: () => 'article', ASIDE: () => 'complementary', BUTTON: () => 'button', DATALIST: () => 'listbox',
    DD: () => 'definition', DT: () => 'term', DETAILS: () => 'group', DIALOG: () => 'dialog', DL: () => 'list',
    FIELDSET: () => 'group', FIGURE: () => 'figure', FORM: (el) => (named(el) ? 'form' : null),
    FOOTER: (el) => (el.closest('article,aside,main,nav,section') ? null : 'contentinfo'),
    HEADER: (el) => (el.closest('article,aside,main,nav,section') ? null : 'banner'),
    HR: () => 'separator', IFRAME: () => 'iframe', FRAME: () => 'iframe',
    IMG: (el) => (el.getAttribute('alt') === '' && !named(el) ? null : 'img'),
    LI: () => 'listitem', MAIN: () => 'main', MENU: () => 'list', METER: () => 'meter', NAV: () => 'navigation',
    OL: () => 'list', UL: () => 'list', OPTGROUP: () => 'group', OPTION: () => 'option', OUTPUT: () => 'status',
    P: () => 'paragraph', PROGRESS: () => 'progressbar', SEARCH: () => 'search',
    SECTION: (el) => (named(el) ? 'region' : null), SELECT: (el) => (el.multiple || el.size > 1 ? 'listbox' : 'combobox'),
    SUMMARY: () => 'button', SVG: (el) => (named(el) ? 'img' : null), TABLE: () => 'table', TBODY: () => 'rowgroup',
    THEAD: () => 'rowgroup', TFOOT: () => 'rowgroup', TR: () => 'row', TD: () => 'cell', CAPTION: () => 'caption',
    TH: (el) => (el.getAttribute('scope') === 'row' ? 'rowheader' : 'columnheader'), TEXTAREA: () => 'textbox',
    BLOCKQUOTE: () => 'blockquote', CODE: () => 'code', PRE: () => null, STRONG: () => 'strong', EM: () => 'emphasis',
    INPUT: (el) => {
      const t = (el.getAttribute('type') || 'text').toLowerCase();
      if (Object.prototype.hasOwnProperty.call(INPUT_ROLES, t)) return INPUT_ROLES[t];
      if (el.hasAttribute('list')) return 'combobox';
      return 'textbox';
    },
  };
  for (let i = 1; i <= 6; i++) IMPLICIT['H' + i] = () => 'heading';
  // Inline roles kept out of the tree: their text stays with the parent's.
  const INLINE = new Set(['strong', 'emphasis', 'code']);

  const roleOf = (el) => {
    const explicit = el.getAttribute('role');
    if (explicit && explicit.trim()) return explicit.trim().split(/\s+/)[0].toLowerCase();
    const tag = el.tagName.toUpperCase();
    const f = IMPLICIT[tag];
    const role = f ? f(el) : null;
    if (role && INLINE.has(role)) return null;
    if (role) return role;
    if (el.isContentEditable && (!el.parentElement || !el.parentElement.isContentEditable)) return 'textbox';
    return null;
  };

  // Roles whose name comes from their content (ARIA "name from: contents").
  const FROM_CONTENT = new Set(['button', 'link', 'heading', 'option', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'checkbox', 'radio', 'switch', 'cell', 'columnheader', 'rowheader', 'treeitem', 'tooltip',
    'gridcell', 'row', 'caption', 'term', 'legend', 'generic-clickable']);
  // Roles that never take their name from content and have a value instead.
  const FIELD = new Set(['textbox', 'searchbox', 'combobox', 'spinbutton', 'slider', 'listbox']);

  // ---------------------------------------------------------------- visibility
  const styleOf = (el) => {
    const view = el.ownerDocument && el.ownerDocument.defaultView;
    try { return view ? view.getComputedStyle(el) : null; } catch (_) { return null; }
  };
  const SKIP_TAGS = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'META', 'LINK', 'TITLE', 'BASE']);

  // ---------------------------------------------------------------- names
  const rootOf = (el) => el.getRootNode ? el.getRootNode() : el.ownerDocument;
  const byId = (el, id) => {
    const root = rootOf(el);
    return (root && root.getElementById ? root.getElementById(id) : null) || el.ownerDocument.getElementById(id);
  };

  /** Rendered text of a subtree (through open shadow roots, slots, image alts), for names. */
  const textOf = (node, budget) => {
    const out = [];
    let left = budget || 400;
    const visit = (n) => {
      if (left <= 0) return;
      if (n.nodeType === 3) { out.push(n.data); left -= n.data.length; return; }
      if (n.nodeType !== 1 && n.nodeType !== 11) return;
      if (n.nodeType === 1) {
        if (SKIP_TAGS.has(n.tagName) || n.getAttribute('aria-hidden') === 'true' || n.hidden) return;
        const label = n !== node && n.getAttribute('aria-label');
        if (label && label.trim()) { out.push(' ' + label + ' '); left -= label.length; return; }
        if (n.tagName === 'IMG' || (n.tagName === 'INPUT' && n.type === 'image')) { out.push(' ' + (n.getAttribute('alt') || '') + ' '); return; }
        if (n !== node && (n.tagName === 'INPUT' || n.tagName === 'TEXTAREA' || n.tagName === 'SELECT')) return;
        if (n.tagName === 'BR') { out.push(' '); return; }
      }
      const kids = childrenOf(n);
      for (const k of kids) visit(k);
    };
    visit(node);
    return norm(out.join(''));
  };

  const labelledBy = (el) => {
    const ids = (el.getAttribute('aria-labelledby') || '').split(/\s+/).filter(Boolean);
    if (!ids.length) return '';
    return norm(ids.map((id) => { const n = byId(el, id); return n ? textOf(n) : ''; }).join(' '));
  };

  const nameOf = (el, role) => {
    const by = labelledBy(el);
    if (by) return by;
    const aria = el.getAttribute('aria-label');
    if (aria && aria.trim()) return norm(aria);
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT' || tag === 'METER' || tag === 'PROGRESS' || tag === 'OUTPUT') {
      if (el.labels && el.labels.length) {
        const t = norm(Array.from(el.labels).map((l) => textOf(l)).join(' '));
        if (t) return t;
      }
      if (tag === 'INPUT') {
        const type = (el.type || '').toLowerCase();
        if (type === 'image') return norm(el.getAttribute('alt') || el.value || el.title || 'Submit');
        if (type === 'submit' || type === 'reset' || type === 'button') return norm(el.value || (type === 'submit' ? 'Submit' : type === 'reset' ? 'Reset' : ''));
      }
    }
    if (tag === 'IMG' || tag === 'AREA') {
      const alt = el.getAttribute('alt');
      if (alt && alt.trim()) return norm(alt);
    }
    if (tag === 'FIELDSET') { const l = el.querySelector(':scope > legend'); if (l) return textOf(l); }
    if (tag === 'FIGURE') { const c = el.querySelector(':scope > figcaption'); if (c) return textOf(c); }
    if (tag === 'TABLE') { const c = el.querySelector(':scope > caption'); if (c) return textOf(c); }
    if (tag === 'IFRAME' || tag === 'FRAME') return norm(el.getAttribute('title') || el.getAttribute('name') || '');
    if (role && FROM_CONTENT.has(role)) {
      const t = textOf(el);
      if (t) return t;
    }
    return norm(el.getAttribute('title') || (FIELD.has(role) ? el.getAttribute('placeholder') : '') || '');
  };

  // ---------------------------------------------------------------- states
  const deepActive = () => {
    let a = document.activeElement;
    for (let i = 0; a && i < 20; i++) {
      if (a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
      else if ((a.tagName === 'IFRAME' || a.tagName === 'FRAME') && frameDoc(a) && frameDoc(a).activeElement) a = frameDoc(a).activeElement;
      else break;
    }
    return a;
  };

  const frameDoc = (el) => {
    try { return el.contentDocument || null; } catch (_) { return null; }
  };

  const statesOf = (el, role, focused) => {
    const s = [];
    const aria = (n) => el.getAttribute(n);
    if (role === 'heading') {
      const level = Number(aria('aria-level')) || (HEADING.test(el.tagName) ? Number(el.tagName[1]) : 2);
      s.push('level=' + level);
    }
    const checkable = role === 'checkbox' || role === 'radio' || role === 'switch' || role === 'menuitemcheckbox' || role === 'menuitemradio';
    if (checkable) {
      const ac = aria('aria-checked');
      const native = el.tagName === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio');
      if (native ? el.indeterminate : ac === 'mixed') s.push('checked=mixed');
      else if (native ? el.checked : ac === 'true') s.push('checked');
    }
    const pressed = aria('aria-pressed');
    if (pressed === 'true') s.push('pressed');
    else if (pressed === 'mixed') s.push('pressed=mixed');
    if (aria('aria-expanded') === 'true' || (el.tagName === 'DETAILS' && el.open)
      || (el.tagName === 'SUMMARY' && el.parentElement && el.parentElement.tagName === 'DETAILS' && el.parentElement.open)) s.push('expanded');
    if (el.tagName === 'OPTION' ? el.selected : aria('aria-selected') === 'true') s.push('selected');
    if (el.disabled === true || aria('aria-disabled') === 'true' || (el.matches && el.matches(':disabled'))) s.push('disabled');
    if (el.required === true || aria('aria-required') === 'true') s.push('required');
    if (aria('aria-invalid') === 'true') s.push('invalid');
    if (focused) s.push('focused');
    return s;
  };

  const valueOf = (el, role) => {
    if (!FIELD.has(role) && role !== 'progressbar' && role !== 'meter') return '';
    if (el.tagName === 'SELECT') {
      const picked = Array.from(el.selectedOptions || []).map((o) => norm(o.text));
      return picked.join(', ');
    }
    let v = '';
    if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'METER' || el.tagName === 'PROGRESS') v = String(el.value == null ? '' : el.value);
    else if (el.isContentEditable) v = el.innerText || '';
    else v = el.getAttribute('aria-valuetext') || el.getAttribute('aria-valuenow') || '';
    if (!v) return '';
    if (sensitiveField(el)) return '[redacted]';
    return clip(norm(v), VALUE_LIMIT);
  };

  // ---------------------------------------------------------------- the walk
  /** Children in the flattened (rendered) tree: a shadow host's shadow root, a slot's assigned nodes. */
  function childrenOf(n) {
    if (n.nodeType === 1) {
      if (n.shadowRoot) return n.shadowRoot.childNodes;
      if (n.tagName === 'SLOT') {
        const assigned = n.assignedNodes({ flatten: true });
        if (assigned.length) return assigned;
      }
    }
    return n.childNodes;
  }

  const quote = (s) => '"' + s.replace(/\\/g, '\\\\').replace(/"/g, '\\"') + '"';

  const walk = (start) => {
    const lines = [];
    const focus = deepActive();
    let capped = false;
    const emit = (depth, text) => {
      if (lines.length >= MAX_NODES) { capped = true; return false; }
      lines.push('  '.repeat(depth) + '- ' + text);
      return true;
    };

    // Text directly under a node (not inside an emitted child) is gathered and emitted as a
    // `text:` line where it falls between element lines.
    const visit = (node, depth, parentCursor, nameCovered, hiddenHere) => {
      let pending = '';
      const flush = () => {
        const t = norm(pending);
        pending = '';
        if (t && !nameCovered) emit(depth, 'text: ' + clip(t, TEXT_LIMIT));
      };
      for (const child of childrenOf(node)) {
        if (capped) return;
        if (child.nodeType === 3) { if (!hiddenHere) pending += child.data; continue; }
        if (child.nodeType !== 1) continue;
        const el = child;
        if (SKIP_TAGS.has(el.tagName) || el.hasAttribute('data-gasoline-overlay')) continue;
        if (el.getAttribute('aria-hidden') === 'true') continue;
        const style = styleOf(el);
        if (style && style.display === 'none') continue;
        if (el.tagName === 'BR') { pending += ' '; continue; }
        const svg = el.namespaceURI === 'http://www.w3.org/2000/svg';
        const hidden = style && (style.visibility === 'hidden' || style.visibility === 'collapse');
        let role = hidden ? null : roleOf(el);
        if (role === 'none' || role === 'presentation') role = null;
        const cursor = style ? style.cursor : '';
        if (!role && !hidden && (el.hasAttribute('onclick') || (el.hasAttribute('tabindex') && el.tabIndex >= 0)
          || (cursor === 'pointer' && parentCursor !== 'pointer'))) role = 'generic-clickable';
        if (!role) {
          // Not in the tree itself: its children are (inline text joins the parent's).
          if (svg) continue;
          // A <label>'s text is its control's name: said on the control's line, not again.
          const quiet = hidden || hiddenHere || (el.tagName === 'LABEL' && !!el.control);
          const block = style && style.display !== 'inline' && style.display !== 'contents';
          if (block) flush();
          visit(el, depth, cursor, nameCovered, quiet);
          if (block) flush();
          continue;
        }
        flush();
        if (nameCovered && FROM_CONTENT.has(role) && !el.querySelector('input,select,textarea,button,a[href],[role],iframe')) {
          continue; // inside a parent named by this content (e.g. a <td> in a row): said already
        }
        const name = clip(nameOf(el, role), NAME_LIMIT);
        const shown = role === 'generic-clickable' ? 'generic' : role;
        let line = shown + (name ? ' ' + quote(name) : '');
        const states = statesOf(el, role, el === focus);
        if (role === 'generic-clickable') states.push('cursor=pointer');
        for (const st of states) line += ' [' + st + ']';
        line += ' [ref=' + refFor(el) + ']';
        const value = valueOf(el, role);
        const isFrame = el.tagName === 'IFRAME' || el.tagName === 'FRAME';
        const doc = isFrame ? frameDoc(el) : null;
        if (isFrame && !doc) line += ' (cross-origin: not walked)';
        // A leaf with plain text (a paragraph, a list item) shows it inline.
        let inline = '';
        if (!value && !isFrame && !FROM_CONTENT.has(role) && !FIELD.has(role) && !el.shadowRoot
          && !el.querySelector('*:not(b,i,em,strong,span,code,small,sup,sub,mark,abbr,time,br,wbr,u,s)')) {
          inline = clip(textOf(el), TEXT_LIMIT);
        }
        if (value) line += ': ' + value;
        else if (inline && inline !== name) line += ': ' + inline;
        if (!emit(depth, line)) return;
        if (inline || svg || (FIELD.has(role) && el.tagName !== 'SELECT' && role !== 'listbox')) continue;
        if (isFrame) {
          if (doc && doc.body) visit(doc.body, depth + 1, '', false, false);
          continue;
        }
        // A node named by its content lists only children that add something (controls, links).
        visit(el, depth + 1, cursor, FROM_CONTENT.has(role) && !!name, false);
      }
      flush();
    };

    if (start.nodeType === 9) visit(start.body || start.documentElement, 0, '', false, false);
    else {
      // A subtree: the node itself, then its content.
      const holder = { nodeType: 11, childNodes: [start] };
      visit(holder, 0, '', false, false);
    }
    return { lines, capped };
  };

  const snapshot = (root) => {
    const { lines, capped } = walk(root || document);
    return {
      document: DOCUMENT_ID,
      url: location.href,
      title: document.title,
      nodes: lines.length,
      capped,
      tree: lines.join('\n'),
    };
  };

  /** The element of `ref` ("e12" or "e12@<document>"); throws {error} when it cannot be used. */
  const element = (spec) => {
    const m = String(spec).trim().match(/^(e\d+)(?:@([a-z0-9]+))?$/i);
    if (!m) throw fail('invalid_param', 'not a ref: ' + spec + ' (refs look like e12, from observe {what:"snapshot"})', { ref: spec });
    const ref = m[1].toLowerCase();
    const stale = () => fail('stale_ref', 'ref ' + ref + ' belongs to a page that is gone: the tab navigated or reloaded '
      + 'since that snapshot. Take a new snapshot (observe {what:"snapshot"}) and use its refs.', { ref });
    if (m[2] && m[2] !== DOCUMENT_ID) throw stale();
    const weak = elementOf.get(ref);
    if (!weak) {
      if (!issued) throw stale();
      throw fail('element_not_found', 'ref ' + ref + ' is not one of this page\'s refs; take a new snapshot', { ref });
    }
    const el = weak.deref();
    if (!el || !el.isConnected) {
      throw fail('element_not_found', 'the element of ref ' + ref + ' was removed from the page; take a new snapshot', { ref });
    }
    return el;
  };

  Object.defineProperty(globalThis, '__gasolineSnapshot', {
    value: Object.freeze({ snapshot, element, roleOf, nameOf, documentId: DOCUMENT_ID }),
    enumerable: false,
  });
})();
