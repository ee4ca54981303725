"""The proxy's own path check by canonical form, against a naive child server
(tests/proxy/naive_server.py: it opens whatever it is given, in every reading a careless server
makes of a string). Every spelling of a path out of the session's directory, enumerated
systematically (plain, dot segments, ``..``, symlinks, ``~``, ``file:`` URLs of every case,
authority and escaping, with query or fragment, percent-escapes once and twice, over 65,536
characters), under a listed key, an unlisted key, as an object key and nested in a list:

  - reaches the secret through the same naive server with the check off
    (``allowedDirectories: []``): each spelling is a real way out;
  - is refused (``path_not_allowed`` / ``path_too_long``) before the call goes out when the
    check is on, and the secret never reaches the agent;
  - is refused the same way when the session overrides the server to ``remote``
    (``allowOverride``): the check does not turn off.
"""

from __future__ import annotations

import json
import os
import sys
from urllib.parse import quote

import pytest
import pytest_twisted

from _proxy_harness import ROOT, Daemon, text_of

pytestmark = pytest.mark.integration

NAIVE = str(ROOT / "tests" / "proxy" / "naive_server.py")
SECRET = "TOP-SECRET-of-another-project"


def _escape_all(path: str) -> str:
    return "".join(f"%{b:02X}" for b in path.encode())


def spellings(tmp_path, wd) -> dict[str, str]:
    """Every spelling of the way out, by name."""
    p = str(tmp_path / "secret.txt")
    out = {
        "absolute": p,
        "double slash": "/" + p,
        "dot segments": p.replace("/", "/./"),
        "relative ..": "../secret.txt",
        "down and up": "sub/../../secret.txt",
        "through a directory symlink": "link/secret.txt",
        "a symlink to the file": "secret-link",
        "home": "~/secret.txt",
        "over 65,536 characters": "/" + "./" * 40_000 + p[1:],
        "over PATH_MAX, short once normalised": "sub/" + "x/../" * 2_000 + "../../secret.txt",
        "symlink then ..": "link/../" + os.path.basename(str(tmp_path)) + "/secret.txt",
        "escaped": quote(p, safe=""),
        "escaped twice": quote(quote(p, safe=""), safe=""),
        "escaped ..": "%2E%2E%2Fsecret.txt",
        "relative file URL": "file:../secret.txt",
        "file URL through a symlink": "file:" + str(wd / "link" / "secret.txt"),
        "file URL with a query": "file://" + p + "?x=1",
        "file URL with a fragment": "file://" + p + "#top",
        "file: then escaped slashes": "file:" + quote(p, safe=""),
        "escaped file URL": quote("file://" + p, safe=""),
    }
    forms = {"plain": p, "escaped": "/" + quote(p[1:], safe=""),
             "all escaped": "/" + _escape_all(p[1:])}
    for scheme in ("file", "FILE", "File", "fiLE"):
        for authority in ("//", "//localhost", "//LOCALHOST", ""):
            for form, path in forms.items():
                out[f"{scheme}:{authority or '(none)'} {form}"] = f"{scheme}:{authority}{path}"
    return out


PLACEMENTS = {
    "listed key": lambda s: {"path": s},
    "unlisted key": lambda s: {"q": s},
    "object key": lambda s: {"options": {s: True}},
    "nested in a list": lambda s: {"items": [{"x": [s]}]},
}


def _server(**extra):
    spec = {"command": sys.executable, "args": [NAIVE]}
    spec.update(extra)
    return spec


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # "~" is tmp_path, where the secret is
    (tmp_path / "secret.txt").write_text(SECRET)
    wd = tmp_path / "proj"
    (wd / "sub" / "x").mkdir(parents=True)
    (wd / "inside.txt").write_text("inside")
    (wd / "link").symlink_to(tmp_path)
    (wd / "secret-link").symlink_to(tmp_path / "secret.txt")
    other = tmp_path / "other"
    other.mkdir()
    return tmp_path, wd, other


def test_the_spellings_are_many_and_distinct(world):
    tmp_path, wd, _ = world
    s = spellings(tmp_path, wd)
    assert len(s) >= 60 and len(set(s.values())) == len(s)
    assert len(s["over 65,536 characters"]) > 65_536


@pytest_twisted.ensureDeferred
async def test_every_spelling_of_a_way_out_is_refused_before_a_naive_server_reads_it(world):
    tmp_path, wd, other = world
    d = Daemon(tmp_path, {
        "naive": _server(allowOverride=True),
        "open": _server(allowedDirectories=[]),  # the check off: the naive server alone
    }).start()
    try:
        sid = await d.session(wd)
        # The override to remote: one shared process (started in $HOME, here tmp_path).
        over = (await d.init(other, preferences={"executionContext": {"naive": "remote"}}))
        assert over["servers"]["naive"]["executionContext"] == "remote"
        osid = over["sessionId"]
        await d.mcp_initialize(osid)
        rid = 100
        leaks, passed, refused = [], [], {}
        for name, spelling in spellings(tmp_path, wd).items():
            for where, place in PLACEMENTS.items():
                args = place(spelling)
                rid += 1
                # With the check off the naive server does read it: a real way out.
                opened = text_of(await d.mcp(sid, "tools/call", {"name": "open__read",
                                                                 "arguments": args}, rid))
                assert opened == SECRET, (name, where, opened[:200])
                for session in (sid, osid):
                    rid += 1
                    r = await d.mcp(session, "tools/call", {"name": "naive__read",
                                                            "arguments": args}, rid)
                    text = text_of(r)
                    if SECRET in text:
                        leaks.append((name, where, session == osid))
                    if r["result"].get("isError") is not True:
                        passed.append((name, where, session == osid, text))
                        continue
                    code = json.loads(text.partition("\n")[2])["error"]
                    refused[code] = refused.get(code, 0) + 1
        assert leaks == []
        # Every one is refused in the session's own instance; in the shared one (started in
        # tmp_path) a relative spelling may name nothing at all there, and passes harmlessly.
        assert [p for p in passed if not p[2]] == []
        assert all(p[3] == "nothing opened" for p in passed), passed
        assert set(refused) <= {"path_not_allowed", "path_too_long"}
        assert refused.get("path_too_long", 0) == 0  # every long one could be normalised
        # What is inside still passes, under any key, and relative to the session's directory.
        for args in ({"path": "inside.txt"}, {"q": "inside.txt"}, {"path": str(wd / "inside.txt")},
                     {"path": "file://" + str(wd / "inside.txt")}, {"q": "hello, world"},
                     {"content": "two lines\n/etc/passwd"}):
            r = await d.mcp(sid, "tools/call", {"name": "naive__read", "arguments": args}, 9)
            assert r["result"].get("isError") is not True, (args, text_of(r))
        assert text_of(await d.mcp(sid, "tools/call", {"name": "naive__read", "arguments": {
            "path": "inside.txt"}}, 10)) == "inside"
    finally:
        await d.stop()


@pytest_twisted.ensureDeferred
async def test_what_cannot_be_resolved_is_refused(world):
    tmp_path, wd, _ = world
    d = Daemon(tmp_path, {"naive": _server()}).start()
    try:
        sid = await d.session(wd)
        cases = {
            "longer than PATH_MAX even normalised": ("a/" * 40_000, "path_too_long"),
            "a file URL of another host": ("file://elsewhere/etc/passwd", "path_not_allowed"),
            "a NUL": ("inside.txt\0/etc/passwd", "path_not_allowed"),
            "an escaped NUL": ("inside.txt%00", "path_not_allowed"),
        }
        for rid, (name, (value, code)) in enumerate(cases.items(), 20):
            r = await d.mcp(sid, "tools/call", {"name": "naive__read",
                                                "arguments": {"path": value}}, rid)
            assert r["result"].get("isError") is True, name
            assert json.loads(text_of(r).partition("\n")[2])["error"] == code, name
    finally:
        await d.stop()


def test_an_unpaired_surrogate_is_refused_by_the_check_itself(tmp_path):
    # The daemon's JSON parser refuses one on /mcp already; the check does not rely on it.
    from gasoline.proxy.paths import PathRefused, check_arguments

    for args in ({"path": "\ud800/../x"}, {"q": "/\ud800"}, {"path": "%2F\ud800"}):
        with pytest.raises(PathRefused):
            check_arguments(args, str(tmp_path), (str(tmp_path),))
    check_arguments({"q": "plain \ud800 text"}, str(tmp_path), (str(tmp_path),))
