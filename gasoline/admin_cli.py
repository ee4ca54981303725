"""
C{gasoline doctor}, C{gasoline status}, C{gasoline stop} and C{gasoline identity}: the daemon's
operations from a shell, without an agent.

Standard library only (no Twisted, no orjson): these are short-lived commands and their start time
is the user's wait.

Which daemon: the one the command names, and no other. C{--url} or C{--port} (on 127.0.0.1) name
the daemon answering there; otherwise the state dir (C{--state-dir}, else C{$GASOLINE_STATE_DIR},
else the default one) names the daemon whose C{daemon.json} it holds. A state dir without a
C{daemon.json}, or whose C{daemon.json} names a process that has exited or a port where another
process answers, has no daemon running: the commands say so and never fall back to a default port
(where another user's or another project's daemon may answer). The commands::

  gasoline status [--port N | --url U | --state-dir D] [--json]
      Is a daemon running, where, which version, with which pid, which clients are connected. Exit
      0 when it answers, 3 when none runs (the LSB "not running" status).
  gasoline doctor [--port N | --url U | --state-dir D] [--json]
      The checks of C{configure {what:"doctor"}} (C{GET /health/doctor}: no client is registered for
      it), plus the local ones (state dir writable, daemon reachable). Exit 1 when any check fails.
  gasoline stop [--port N | --url U | --state-dir D] [--timeout S]
      A graceful stop (SIGTERM: the daemon flushes its journals and removes daemon.json) of that
      daemon (the pid its C{/health} reports); waits up to C{--timeout} seconds for it to exit.
      Exit 0 when it stopped (or none was running), 1 when it did not.
  gasoline identity [--port N | --url U | --state-dir D] [--json]
      The fingerprint the extension's popup asks the user to compare when pairing: asked of the
      running daemon (C{GET /pairing}); with no daemon running, read from the state dir's key file
      when there is one. Never creates a key.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from gasoline.common import default_state_dir, not_private
from gasoline.core.trust.keyfile import (
    IDENTITY_FILE,
    fingerprint_of,
    public_key_from_pem,
)
from gasoline.daemon_dir import StateDirProblem, checked_state_dir

#: The port a daemon started with no options listens on (only ever used when named: --port).
DEFAULT_PORT = 7890
#: The LSB exit status of C{status} when no daemon is running.
NOT_RUNNING = 3
#: Linux's process table: whether a pid is a zombie, what command it runs. Where it is missing
#: (macOS, Windows) the commands fall back: a pid that answers C{kill(pid, 0)} is alive, and the
#: daemon's own C{/health} is trusted for what it is.
PROC = Path("/proc")


class _Parser(argparse.ArgumentParser):
    """Usage errors: one line naming the problem and C{--help}, on stderr, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser(command: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"gasoline {command}")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--port", "-p", type=int, help="the daemon on this port of 127.0.0.1")
    where.add_argument("--url", help="the daemon at this base URL")
    where.add_argument("--state-dir", type=Path,
                       help="the daemon whose daemon.json is in this state directory (default: "
                       "$GASOLINE_STATE_DIR, else the platform's state dir)")
    p.add_argument("--api-key", default=os.environ.get("GASOLINE_API_KEY") or None,
                   help="for a daemon started with --api-key (default: $GASOLINE_API_KEY)")
    p.add_argument("--timeout", type=float, default=10.0 if command == "stop" else 3.0,
                   help="seconds to wait for the daemon")
    if command != "stop":
        p.add_argument("--json", action="store_true", help="print JSON")
    else:
        p.set_defaults(json=False)  # (one shape of options for every command)
    return p


def _state_dir(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    return default_state_dir()


def _daemon_info(state_dir: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((state_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


class Target:
    """The daemon a command names: C{url} (None when no daemon runs for the state dir named, then
    C{why} says so) and the C{daemon.json} describing it (C{info}, when one does)."""

    def __init__(self, url: str | None, info: dict[str, Any] | None, state_dir: Path | None,
                 why: str = "") -> None:
        self.url = url
        self.info = info
        self.state_dir = state_dir
        self.why = why
        #: Why the state dir of a daemon named by --port/--url could not be trusted (its
        #: identity is not the one in the dir its /health names), else "".
        self.state_dir_problem = ""

    @property
    def where(self) -> str:
        return self.url or f"state dir {self.state_dir}"

    def name_state_dir(self, health: dict[str, Any], offered: dict[str, Any] | None) -> None:
        """For a daemon named by --port/--url: its state dir is the one its C{/health} names,
        its identity (C{offered} by its C{/pairing}) checked (the rule of the connector and of
        gasoline browser: L{gasoline.daemon_dir.checked_state_dir}); or, when that fails,
        L{state_dir_problem} says why."""
        assert self.url is not None
        try:
            self.state_dir = checked_state_dir(self.url, health, offered)
        except StateDirProblem as e:
            self.state_dir_problem = str(e)


def locate(opts: argparse.Namespace) -> Target:
    """The daemon C{opts} names (see the module docstring); never a default port."""
    if opts.url or opts.port is not None:
        url = opts.url.rstrip("/") if opts.url else f"http://127.0.0.1:{opts.port}"
        return Target(url, None, None)
    state_dir = _state_dir(opts.state_dir)
    info = _daemon_info(state_dir)
    if info is None or not isinstance(info.get("url"), str):
        return Target(None, None, state_dir,
                      f"no daemon runs for state dir {state_dir} (it holds no daemon.json; "
                      "name a daemon elsewhere with --port or --url)")
    pid = info.get("pid")
    if isinstance(pid, int) and not _alive(pid):
        return Target(None, None, state_dir,
                      f"no daemon runs for state dir {state_dir} (its daemon.json names pid "
                      f"{pid}, which has exited)")
    return Target(info["url"].rstrip("/"), info, state_dir)


def _same_daemon(target: Target, h: dict[str, Any]) -> bool:
    """Whether the daemon that answered is the one the state dir's daemon.json names."""
    if target.info is None:
        return True
    return not isinstance(target.info.get("pid"), int) or h.get("pid") == target.info["pid"]


def _health_of(target: Target, opts: argparse.Namespace) -> tuple[dict[str, Any] | None, str]:
    """The named daemon's C{/health} and, when there is none, the sentence that says why."""
    if target.url is None:
        return None, target.why
    h = health(target.url, opts)
    if h is None:
        return None, f"no Gasoline daemon answers at {target.url}"
    if not _same_daemon(target, h):
        assert target.info is not None  # _same_daemon is true without one
        return None, (f"no daemon runs for state dir {target.state_dir}: its daemon.json names "
                      f"pid {target.info.get('pid')} at {target.url}, but the daemon answering "
                      f"there is pid {h.get('pid')} (another state dir's)")
    if target.state_dir is None:
        # Named by --port/--url: its state dir is the one its /health names.
        try:
            code, offered = _request(target.url + "/pairing", opts)
        except (OSError, ValueError):
            code, offered = 0, None
        target.name_state_dir(h, offered if code == 200 and isinstance(offered, dict) else None)
    return h, ""


def _request(url: str, opts: argparse.Namespace, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    h = {"Accept": "application/json"}
    if data is not None:
        h["Content-Type"] = "application/json"
    if opts.api_key:
        h["X-Gasoline-Key"] = opts.api_key
    h.update(headers or {})
    req = urllib.request.Request(url, data=data, headers=h, method="GET" if data is None
                                 else "POST")
    try:
        with urllib.request.urlopen(req, timeout=opts.timeout) as resp:  # loopback
            raw = resp.read(8 << 20)
            status = resp.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(1 << 20), e.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def health(url: str, opts: argparse.Namespace) -> dict[str, Any] | None:
    """The daemon's C{/health}, or None when no Gasoline daemon answers there."""
    try:
        status, body = _request(url + "/health", opts)
    except (OSError, ValueError):
        return None
    if status != 200 or not isinstance(body, dict) or body.get("service-name") != "gasoline":
        return None
    return body


def _out(opts: argparse.Namespace, data: dict[str, Any], lines: list[str]) -> None:
    if opts.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


# -- status ----------------------------------------------------------------------------------


def _as_dict(value: Any) -> dict[str, Any]:
    """C{value} when a JSON object, else an empty one (a field of an answer not to be trusted)."""
    return value if isinstance(value, dict) else {}


def connected_clients(h: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The clients C{/health} lists as connected, and how many more it remembers (gone, their
    state kept for the TTL)."""
    clients = _as_dict(h.get("clients"))
    listed = [c for c in clients.get("list", []) if isinstance(c, dict)]
    live = [c for c in listed if c.get("connected", True)]
    return live, len(listed) - len(live)


def status(argv: list[str]) -> int:
    opts = _parser("status").parse_args(argv)
    target = locate(opts)
    h, why = _health_of(target, opts)
    if h is None:
        _out(opts, {"running": False, "url": target.url,
                    "state_dir": str(target.state_dir) if target.state_dir else None,
                    "reason": why}, [f"gasoline: {why}"])
        return NOT_RUNNING
    url = target.url
    assert url is not None  # a daemon answered there
    live, remembered = connected_clients(h)
    capture = _as_dict(h.get("capture"))
    pid = h.get("pid") if isinstance(h.get("pid"), int) else (target.info or {}).get("pid")
    port = (target.info or {}).get("port") or _port_of(url)
    data = {"running": True, "url": url, "port": port, "version": h.get("version"), "pid": pid,
            "uptime_seconds": h.get("uptime_seconds"),
            "extension_connected": capture.get("extension_connected"),
            "extension_state": capture.get("extension_state"),
            "pairing": capture.get("pairing"),
            "clients": live, "clients_remembered": remembered,
            "state_dir": str(target.state_dir) if target.state_dir else None}
    lines = [f"gasoline {h.get('version')} running at {url}"
             + (f" (pid {pid})" if pid else ""),
             "extension: " + ("connected" if data["extension_connected"] else
                              "waiting for the user to pair it (open the Gasoline popup, compare "
                              "the fingerprint with `gasoline identity`, click \"Pair with this "
                              "daemon\")" if capture.get("extension_state") == "waiting_for_pairing"
                              else "not connected"),
             f"clients: {len(live)} connected"
             + (f" ({remembered} more gone, their state kept for the TTL)" if remembered else "")]
    if target.state_dir is not None:
        lines.insert(1, f"state dir: {target.state_dir}")
    elif target.state_dir_problem:
        lines.insert(1, f"state dir: unknown ({target.state_dir_problem})")
    pairing = _as_dict(capture.get("pairing"))
    if pairing:
        lines[2:2] = [f"daemon identity: {pairing.get('daemon_fingerprint')}",
                      f"pinned extension: {pairing.get('extension_fingerprint') or 'none yet'}"
                      + "".join(f"\nrefused extension: {fp} (gasoline pair accept {fp})"
                                for fp in pairing.get("refused_extensions") or [])]
    for c in live:
        bits = [str(c.get(k)) for k in ("cwd", "state") if c.get(k)]
        lines.append(f"  {c.get('id') or c.get('client_id')}" + (f" ({', '.join(bits)})"
                                                                 if bits else ""))
    _out(opts, data, lines)
    return 0


def _port_of(url: str | None) -> int | None:
    try:
        return urlsplit(url or "").port
    except ValueError:
        return None


# -- doctor ----------------------------------------------------------------------------------


def _ask_doctor(url: str, opts: argparse.Namespace) -> dict[str, Any] | None:
    """The daemon's C{GET /health/doctor} (the checks of C{configure doctor}; no client is
    registered for them); its JSON, or None."""
    try:
        status_code, body = _request(url + "/health/doctor", opts)
    except (OSError, ValueError):
        return None
    return body if status_code == 200 and isinstance(body, dict) else None


def _privacy_check(state_dir: Path) -> dict[str, Any]:
    """Warn when the state dir or anything in it is not private (0700 folders, 0600 files): it
    holds client ids, project paths, captured telemetry and the keys."""
    loose = not_private(state_dir)
    if not loose:
        return {"check": "state_dir_private", "status": "ok",
                "detail": f"{state_dir} and its files are private to this user"}
    shown = ", ".join(f"{p} ({mode:04o})" for p, mode in loose[:5])
    more = f" and {len(loose) - 5} more" if len(loose) > 5 else ""
    return {"check": "state_dir_private", "status": "warn",
            "detail": f"{len(loose)} state paths other local users may read or write: "
                      f"{shown}{more}",
            "fix": f"chmod -R go= {state_dir}"}


def doctor(argv: list[str]) -> int:
    opts = _parser("doctor").parse_args(argv)
    target = locate(opts)
    checks: list[dict[str, Any]] = []
    h, why = _health_of(target, opts)  # names the state dir of a daemon named by --port/--url
    state_dir = target.state_dir
    if target.state_dir_problem:
        checks.append({"check": "state_dir", "status": "fail",
                       "detail": target.state_dir_problem,
                       "fix": "Pass the daemon's --state-dir, as the user that runs it."})
    if state_dir is not None:
        probe = state_dir if state_dir.is_dir() else state_dir.parent
        writable = os.access(probe, os.W_OK) if probe.exists() else False
        checks.append({"check": "state_dir", "status": "ok" if writable else "fail",
                       "detail": f"{state_dir} {'is' if writable else 'is not'} writable",
                       **({} if writable else
                          {"fix": "Point --state-dir at a writable directory."})})
        if state_dir.is_dir():
            checks.append(_privacy_check(state_dir))
    url = target.url
    port = (target.info or {}).get("port") or _port_of(url)
    if h is None:
        checks.append({"check": "daemon", "status": "fail", "detail": why,
                       "fix": "Start it (gasoline serve, or let an agent's gasoline connect "
                       "start it), or name the running one with --port, --url or --state-dir."})
    else:
        assert url is not None  # a daemon answered there
        checks.append({"check": "daemon", "status": "ok",
                       "detail": f"gasoline {h.get('version')} at {url} (pid {h.get('pid')})"})
        checks.append({"check": "port", "status": "ok", "detail": f"listening on port {port}"})
        answer = _ask_doctor(url, opts)
        if answer is None:
            checks.append({"check": "doctor", "status": "fail",
                           "detail": "the daemon did not answer GET /health/doctor",
                           "fix": "See the daemon's log (daemon.log in the state dir); an "
                           "older daemon: upgrade it."})
        else:
            checks.extend(c for c in answer.get("checks", []) if isinstance(c, dict))
    failing = [c for c in checks if c.get("status") == "fail"]
    lines = []
    for c in checks:
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}.get(str(c.get("status")), "?   ")
        lines.append(f"[{mark}] {c.get('check')}: {c.get('detail')}")
        if c.get("fix") and c.get("status") != "ok":
            lines.append(f"       fix: {c['fix']}")
    lines.append("doctor: " + (f"{len(failing)} failing" if failing else "no failing checks"))
    _out(opts, {"url": url, "port": port, "checks": checks, "ok": not failing}, lines)
    return 1 if failing else 0


# -- stop ------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    try:  # a zombie (our own unreaped child, in tests) has exited
        return (PROC / str(pid) / "stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def _looks_like_gasoline(pid: int) -> bool:
    try:
        cmdline = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return True  # no /proc here: trust the daemon's own /health
    return b"gasoline" in cmdline or b"twistd" in cmdline


def stop(argv: list[str]) -> int:
    opts = _parser("stop").parse_args(argv)
    target = locate(opts)
    h, why = _health_of(target, opts)
    if h is None:
        print(f"gasoline: {why}; nothing to stop")
        return 0
    url = target.url
    pid = h.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        print(f"gasoline: the daemon at {url} does not report its pid; not stopping it",
              file=sys.stderr)
        return 1
    if not _alive(pid):
        print(f"gasoline: the daemon at {url} names pid {pid}, which is not a process here "
              "(another machine or container?); not stopping it", file=sys.stderr)
        return 1
    if not _looks_like_gasoline(pid):
        print(f"gasoline: pid {pid} (from {url}/health) is not a Gasoline daemon; not stopping it",
              file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + opts.timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            print(f"gasoline: stopped the daemon (pid {pid}) at {url}")
            return 0
        time.sleep(0.05)
    print(f"gasoline: the daemon (pid {pid}) did not exit within {opts.timeout:g} s",
          file=sys.stderr)
    return 1


# -- identity --------------------------------------------------------------------------------


def identity(argv: list[str]) -> int:
    """The daemon identity's fingerprint: asked of the running daemon (C{GET /pairing}); with none
    running for a state dir, read from its key file. Never creates a key."""
    opts = _parser("identity").parse_args(argv)
    target = locate(opts)
    h, why = _health_of(target, opts)
    if h is not None:
        assert target.url is not None  # a daemon answered there
        try:
            code, body = _request(target.url + "/pairing", opts)
        except (OSError, ValueError):
            code, body = 0, None
        fingerprint = body.get("fingerprint") if isinstance(body, dict) else None
        if code != 200 or not isinstance(fingerprint, str):
            print(f"gasoline: the daemon at {target.url} did not answer GET /pairing (HTTP "
                  f"{code}); an older daemon offers no pairing", file=sys.stderr)
            return 1
        _out(opts, {"fingerprint": fingerprint, "url": target.url, "pid": h.get("pid"),
                    "running": True},
             [f"gasoline daemon identity {fingerprint} (the daemon at {target.url}, "
              f"pid {h.get('pid')})"])
        return 0
    if target.state_dir is None:
        print(f"gasoline: {why}", file=sys.stderr)
        return NOT_RUNNING
    path = target.state_dir / IDENTITY_FILE
    try:
        raw = public_key_from_pem(path.read_bytes())
    except OSError:
        print(f"gasoline: {why}, and it has no identity yet ({path} does not exist): start the "
              "daemon (it creates its identity when it starts), then run this again",
              file=sys.stderr)
        return NOT_RUNNING
    if raw is None:
        print(f"gasoline: {path} is not a P-256 key the daemon can use", file=sys.stderr)
        return 1
    fingerprint = fingerprint_of(raw)
    _out(opts, {"fingerprint": fingerprint, "state_dir": str(target.state_dir),
                "running": False},
         [f"gasoline daemon identity {fingerprint} (state dir {target.state_dir}; {why})"])
    return 0


COMMANDS = {"doctor": doctor, "status": status, "stop": stop, "identity": identity}
