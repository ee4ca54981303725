"""
C{interact get_readable} and C{get_markdown}: the page's main text, or the page as Markdown, read
by a script run in the page through the extension's C{execute} (so only with the pilot on). The
other C{interact} modes are in L{gasoline.tools.interact}.
"""

from __future__ import annotations

from typing import Any

from gasoline.tools._actions import execute_params
from gasoline.tools._commands import require_pilot
from gasoline.tools._shared import as_dict, extension_mode


#: Page text extraction (runs in the page through C{execute}): an expression.
READABLE_SCRIPT = r"""(() => {
  const root = document.querySelector('article, main, [role=main]') || document.body;
  const skip = 'SCRIPT,STYLE,NOSCRIPT,TEMPLATE,SVG,NAV,FOOTER,ASIDE,IFRAME,FORM';
  const clone = root.cloneNode(true);
  clone.querySelectorAll(skip.toLowerCase()).forEach((n) => n.remove());
  const text = (clone.innerText || clone.textContent || '').replace(/\n{3,}/g, '\n\n').trim();
  return { url: location.href, title: document.title, text: text.slice(0, 200000),
           length: text.length, truncated: text.length > 200000 };
})()"""

#: Markdown conversion of the main content (runs in the page through C{execute}).
MARKDOWN_SCRIPT = r"""(() => {
  const root = document.querySelector('article, main, [role=main]') || document.body;
  const SKIP = new Set(['SCRIPT','STYLE','NOSCRIPT','TEMPLATE','SVG','NAV','FOOTER','ASIDE','IFRAME','BUTTON','INPUT','SELECT','TEXTAREA']);
  const inline = (node) => {
    let out = '';
    for (const c of node.childNodes) {
      if (c.nodeType === 3) { out += c.textContent.replace(/\s+/g, ' '); continue; }
      if (c.nodeType !== 1 || SKIP.has(c.tagName)) continue;
      const t = inline(c);
      if (c.tagName === 'A' && c.getAttribute('href')) out += '[' + t.trim() + '](' + c.href + ')';
      else if (c.tagName === 'STRONG' || c.tagName === 'B') out += '**' + t.trim() + '**';
      else if (c.tagName === 'EM' || c.tagName === 'I') out += '*' + t.trim() + '*';
      else if (c.tagName === 'CODE') out += '`' + t.trim() + '`';
      else if (c.tagName === 'IMG') out += '![' + (c.getAttribute('alt') || '') + '](' + c.src + ')';
      else if (c.tagName === 'BR') out += '\n';
      else out += t;
    }
    return out;
  };
  const blocks = [];
  const walk = (node, depth) => {
    for (const c of node.children) {
      if (SKIP.has(c.tagName) || c.hidden) continue;
      const tag = c.tagName;
      if (/^H[1-6]$/.test(tag)) blocks.push('#'.repeat(Number(tag[1])) + ' ' + inline(c).trim());
      else if (tag === 'P') { const t = inline(c).trim(); if (t) blocks.push(t); }
      else if (tag === 'PRE') blocks.push('```\n' + c.textContent.replace(/\n+$/, '') + '\n```');
      else if (tag === 'BLOCKQUOTE') blocks.push(inline(c).trim().split('\n').map((l) => '> ' + l).join('\n'));
      else if (tag === 'UL' || tag === 'OL') {
        let i = 1;
        const items = [];
        for (const li of c.children) if (li.tagName === 'LI') items.push('  '.repeat(depth) + (tag === 'OL' ? (i++) + '. ' : '- ') + inline(li).trim());
        blocks.push(items.join('\n'));
      } else if (tag === 'TABLE') {
        const rows = Array.from(c.rows).slice(0, 200).map((r) => '| ' + Array.from(r.cells).map((x) => inline(x).trim().replace(/\|/g, '\\|')).join(' | ') + ' |');
        if (rows.length) { const n = c.rows[0].cells.length; rows.splice(1, 0, '|' + ' --- |'.repeat(n)); }
        blocks.push(rows.join('\n'));
      } else if (tag === 'HR') blocks.push('---');
      else if (tag === 'IMG') blocks.push(inline({ childNodes: [c] }));
      else walk(c, depth);
    }
  };
  walk(root, 0);
  const md = blocks.filter(Boolean).join('\n\n');
  return { url: location.href, title: document.title, markdown: md.slice(0, 200000),
           length: md.length, truncated: md.length > 200000 };
})()"""


def _page_script(ctx: Any, args: dict[str, Any], script: str, key: str) -> Any:
    require_pilot(ctx)  # the extension runs ``execute`` only with the pilot on
    params = execute_params(ctx, args, script)

    def describe(result: Any) -> tuple[str, dict[str, Any]]:
        r = as_dict(result)
        inner = raw_inner if isinstance(raw_inner := r.get("result"), dict) else r
        return (f"{ctx.mode}: {inner.get('length', 0)} characters of {inner.get('url') or 'the page'}",
                {"url": inner.get("url"), "title": inner.get("title"), key: inner.get(key),
                 "truncated": inner.get("truncated", False)})

    return extension_mode(ctx, args, "execute", params, describe)


def get_readable(ctx: Any, args: dict[str, Any]) -> Any:
    return _page_script(ctx, args, READABLE_SCRIPT, "text")


def get_markdown(ctx: Any, args: dict[str, Any]) -> Any:
    return _page_script(ctx, args, MARKDOWN_SCRIPT, "markdown")
