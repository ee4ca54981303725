"""
The agents' page snapshot: C{observe {what:"snapshot"}} (also C{analyze {what:"snapshot"}}).

The extension walks the tracked tab (extension/content/snapshot.js) and sends the whole tree, one
node per line with a ref each; here it is cut to the caller's budget (C{max_nodes},
C{max_bytes}, from C{offset}) with a marker that says where it stopped and how to get the rest,
or, with C{diff: true}, reduced to what changed since the caller's own previous snapshot of that
tab. The previous snapshot is kept per client and per tab (L{SnapshotBases}): another agent's
snapshot never moves your diff base.

Refs (C{e12}) name elements until the tab leaves the document; L{ref_selector} turns an agent's
C{ref} into the C{ref=e12@<document>} selector the extension resolves, so a ref of a page the tab
has left is refused (C{stale_ref}) instead of hitting whatever now holds that number.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from typing import Any

import attrs

from gasoline.core.errors import InvalidParam
from gasoline.tools._shared import as_dict, call

#: Default budget of one answer (lines and UTF-8 bytes of the tree text).
DEFAULT_MAX_NODES = 800
DEFAULT_MAX_BYTES = 24_000
MAX_MAX_NODES = 20_000
#: Below the 100 kB cap every tool result has.
MAX_MAX_BYTES = 90_000
#: Clients and tabs per client whose last snapshot is kept for diffs and refs.
MAX_CLIENTS = 100
MAX_TABS = 8

REF_RE = re.compile(r"\[ref=(e\d+)\]")
_REF_ARG = re.compile(r"^\s*(?:\[?ref=)?(e\d+)\]?\s*$", re.I)


@attrs.frozen
class Kept:
    """One client's last whole-page snapshot of one tab."""

    document: str
    url: str
    lines: tuple[str, ...]
    #: The snapshot before it, of the same document (what a diff's later pages, C{offset} > 0,
    #: still compare against).
    prior: tuple[str, ...] | None = None


@attrs.define(eq=False)
class SnapshotBases:
    """Per client, per tab: the last whole-page snapshot (bounded: L{MAX_CLIENTS} clients,
    L{MAX_TABS} tabs each, least recently used forgotten first)."""

    by_client: OrderedDict[str, OrderedDict[int, Kept]] = attrs.field(factory=OrderedDict)
    #: client id -> the tab of its newest snapshot.
    last_tab: dict[str, int] = attrs.field(factory=dict)

    def get(self, client_id: str, tab_id: int | None) -> Kept | None:
        tabs = self.by_client.get(client_id)
        if tabs is None:
            return None
        if tab_id is None:
            tab_id = self.last_tab.get(client_id)
        return tabs.get(tab_id) if tab_id is not None else None

    def put(self, client_id: str, tab_id: int, kept: Kept) -> None:
        tabs = self.by_client.pop(client_id, None)
        if tabs is None:
            tabs = OrderedDict()
            while len(self.by_client) >= MAX_CLIENTS:
                gone, _ = self.by_client.popitem(last=False)
                self.last_tab.pop(gone, None)
        self.by_client[client_id] = tabs
        tabs.pop(tab_id, None)
        tabs[tab_id] = kept
        while len(tabs) > MAX_TABS:
            tabs.popitem(last=False)
        self.last_tab[client_id] = tab_id


def _bases(ctx: Any) -> SnapshotBases:
    bases: SnapshotBases = ctx.runtime.snapshot_bases(SnapshotBases)
    return bases


def ref_selector(ctx: Any, args: dict[str, Any], ref: str) -> str:
    """The selector the extension resolves for the caller's C{ref}: tied to the document of the
    caller's last snapshot of the tab (C{tab_id}, else the tab it last took one of)."""
    m = _REF_ARG.match(ref)
    if not m:
        raise InvalidParam(f"ref must look like e12 (from observe {{what:\"snapshot\"}}), not {ref!r}",
                           param="ref")
    kept = _bases(ctx).get(ctx.client_id, ctx.int_arg(args, "tab_id", None, 0, 2**53))
    return f"ref={m.group(1).lower()}" + (f"@{kept.document}" if kept is not None else "")


# -- cutting and diffing ----------------------------------------------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _container(lines: list[str], i: int) -> str | None:
    """The ref of the nearest line above C{i} that holds it (less indented, with a ref)."""
    depth = _indent(lines[i])
    for j in range(i - 1, -1, -1):
        if _indent(lines[j]) < depth:
            m = REF_RE.search(lines[j])
            if m:
                return m.group(1)
            depth = _indent(lines[j])
    return None


def _path(lines: list[str], i: int) -> list[str]:
    """The lines holding line C{i}, outermost first, without indentation."""
    out: list[str] = []
    depth = _indent(lines[i])
    for j in range(i - 1, -1, -1):
        if _indent(lines[j]) < depth:
            out.append(lines[j].strip())
            depth = _indent(lines[j])
            if depth == 0:
                break
    return out[::-1]


def cut(lines: list[str], offset: int, max_nodes: int, max_bytes: int,
        what: str = "snapshot") -> tuple[list[str], int | None]:
    """Lines C{offset}.. within the budget, then (when some are left) one marker line saying
    where the cut is and how to continue. Returns (lines shown, next offset or None)."""
    out: list[str] = []
    if offset:
        out.append(f"# from line {offset + 1} of {len(lines)}"
                   + (f", inside: {' > '.join(_path(lines, offset))}" if offset < len(lines)
                      and _indent(lines[offset]) else ""))
    size = sum(len(x.encode()) + 1 for x in out)
    for i in range(offset, len(lines)):
        line = lines[i]
        cost = len(line.encode()) + 1
        if len(out) - (1 if offset else 0) >= max_nodes or size + cost > max_bytes:
            reason = (f"max_nodes {max_nodes}" if len(out) - (1 if offset else 0) >= max_nodes
                      else f"max_bytes {max_bytes}")
            where = _container(lines, i)
            more = f"{{what:\"{what}\", offset:{i}}}"
            if where is not None and what == "snapshot":
                more += f", or only the part under {where}: {{what:\"snapshot\", ref:\"{where}\"}}"
            out.append(f"# cut at line {i + 1} of {len(lines)} ({reason}): {len(lines) - i} more; "
                       f"continue with {more}, or raise max_nodes / max_bytes")
            return out, i
        out.append(line)
        size += cost
    return out, None


def _keyed(lines: tuple[str, ...] | list[str]) -> dict[str, tuple[int, str, str]]:
    """Each line by a key that survives other lines coming and going: its ref, or (for text
    lines) the ref of the node holding it, its text and its rank among equal ones."""
    out: dict[str, tuple[int, str, str]] = {}
    stack: list[tuple[int, str]] = []
    seen: Counter[tuple[str, str]] = Counter()
    for i, line in enumerate(lines):
        depth = _indent(line)
        content = line.strip()
        if content.startswith("- "):
            content = content[2:]
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        m = REF_RE.search(content)
        if m:
            key = m.group(1)
            stack.append((depth, key))
        else:
            seen[(parent, content)] += 1
            key = f"{parent}|{content}|{seen[(parent, content)]}"
        out[key] = (i, content, parent)
    return out


def diff(before: tuple[str, ...] | list[str], after: tuple[str, ...] | list[str]) -> tuple[list[str], dict[str, int]]:
    """What changed between two snapshots of one document, in the newer one's order, removals
    last: C{+ line (in e4)}, C{~ line (was: old)}, C{- line}."""
    old = _keyed(before)
    new = _keyed(after)
    out: list[str] = []
    counts = {"added": 0, "changed": 0, "removed": 0}
    for key, (_, content, parent) in sorted(new.items(), key=lambda kv: kv[1][0]):
        if key not in old:
            counts["added"] += 1
            out.append(f"+ {content}" + (f" (in {parent})" if parent else ""))
        elif old[key][1] != content:
            counts["changed"] += 1
            out.append(f"~ {content} (was: {old[key][1]})")
    for key, (_, content, parent) in sorted(old.items(), key=lambda kv: kv[1][0]):
        if key not in new:
            counts["removed"] += 1
            out.append(f"- {content}" + (f" (in {parent})" if parent else ""))
    return out, counts


# -- the mode ---------------------------------------------------------------------------------------


def observe_snapshot(ctx: Any, args: dict[str, Any]) -> Any:
    """The tracked tab's accessibility tree as text with refs, within a budget; or only what
    changed since the caller's last snapshot of the tab (C{diff: true})."""
    want_diff = ctx.bool_arg(args, "diff")
    max_nodes = ctx.int_arg(args, "max_nodes", DEFAULT_MAX_NODES, 1, MAX_MAX_NODES)
    max_bytes = ctx.int_arg(args, "max_bytes", DEFAULT_MAX_BYTES, 200, MAX_MAX_BYTES)
    offset = ctx.int_arg(args, "offset", 0, 0, MAX_MAX_NODES * 2)
    params: dict[str, Any] = {}
    ref = ctx.str_arg(args, "ref")
    selector = ctx.str_arg(args, "selector")
    if ref:
        params["selector"] = ref_selector(ctx, args, ref)
    elif selector and selector.strip():
        params["selector"] = selector
    if want_diff and params:
        raise InvalidParam("diff compares whole-page snapshots: drop ref/selector, or take the "
                           "part without diff", param="diff")

    def answer(result: Any) -> dict[str, Any]:
        r = as_dict(result)
        tree = r.get("tree") if isinstance(r.get("tree"), str) else ""
        lines = tree.split("\n") if tree else []
        document = str(r.get("document") or "")
        tab = r.get("tab_id") if isinstance(r.get("tab_id"), int) else None
        url = str(r.get("url") or "")
        bases = _bases(ctx)
        before = bases.get(ctx.client_id, tab) if tab is not None else None
        same = before is not None and before.document == document
        # A diff's later pages (offset > 0) compare against the base its first page used.
        base = (before.prior if want_diff and offset and same and before is not None
                and before.prior is not None else before.lines if same and before else None)
        if not params and tab is not None and document:
            bases.put(ctx.client_id, tab, Kept(document, url, tuple(lines), base if want_diff and offset
                                               else before.lines if same and before else None))
        meta: dict[str, Any] = {"url": url, "title": r.get("title"), "tab_id": tab,
                                "nodes": len(lines)}
        if r.get("capped"):
            meta["capped"] = (f"the page has more than {len(lines)} nodes: only the first "
                              f"{len(lines)} were walked (take parts with ref)")
        if want_diff and base is not None:
            changes, counts = diff(base, lines)
            shown, next_offset = cut(changes, offset, max_nodes, max_bytes, what="snapshot, diff:true")
            meta.update(diff=counts)
            total = sum(counts.values())
            summary = (f"snapshot diff of {url}: {counts['added']} added, {counts['changed']} "
                       f"changed, {counts['removed']} removed (of {len(lines)} nodes) since your "
                       f"last snapshot" if total else
                       f"snapshot diff of {url}: no change since your last snapshot "
                       f"({len(lines)} nodes)")
        else:
            shown, next_offset = cut(lines, offset, max_nodes, max_bytes)
            summary = f"snapshot of {url}: {len(lines)} nodes"
            if want_diff:
                meta["diff"] = None
                summary += (" (the page navigated since your last snapshot: the whole tree)"
                            if before is not None else
                            " (no earlier snapshot of this tab by you: the whole tree)")
        if next_offset is not None:
            meta["next_offset"] = next_offset
            summary += f"; cut at line {next_offset + 1}"
        out = ctx.ok(summary, meta)
        out["content"].append({"type": "text", "text": "\n".join(shown) if shown else "(empty)"})
        return out

    return call(ctx, args, "snapshot", params).addCallback(answer)
