"""
C{gasoline doctor}, C{gasoline status} and C{gasoline stop}: the daemon's operations from a
shell, without an agent.

Standard library only (no Twisted, no orjson): these are short-lived commands and their start time
is the user's wait. The daemon is found the way the connector finds it: C{--url}, else
C{--port} on 127.0.0.1, else C{<state-dir>/daemon.json} (written by a running daemon), else the
default port 7890. The commands::

  gasoline status [--port N | --url U] [--state-dir D] [--json]
      Is a daemon running, where, which version, with which pid, who is connected. Exit 0 when it
      answers, 3 when nothing answers (the LSB "not running" status).
  gasoline doctor [--port N | --url U] [--state-dir D] [--json]
      The checks of C{configure {what:"doctor"}} (asked of the daemon as one stateless MCP request,
      docs/mcp.md), plus the local ones (state dir writable, daemon reachable). Exit 1 when any
      check fails.
  gasoline stop [--port N | --url U] [--state-dir D] [--timeout S]
      A graceful stop (SIGTERM: the daemon flushes its journals and removes daemon.json) of the
      daemon on that port: the pid its C{/health} reports, else the one C{daemon.json} (for that
      port) or C{<state-dir>/gasoline.pid} names; waits
      up to C{--timeout} seconds for it to exit. Exit 0 when it stopped (or none was running), 1
      when it did not.
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
from typing import Any

DEFAULT_PORT = 7890
#: The LSB exit status of C{status} when no daemon is running.
NOT_RUNNING = 3
#: The client id C{gasoline doctor} asks the daemon as.
DOCTOR_CLIENT = "gasoline-cli-doctor"
STATELESS_VERSION = "2026-07-28"


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"gasoline {command}")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--port", "-p", type=int, help="the daemon's port on 127.0.0.1")
    where.add_argument("--url", help="the daemon's base URL (default: from daemon.json, else "
                       f"http://127.0.0.1:{DEFAULT_PORT})")
    p.add_argument("--state-dir", type=Path, help="the daemon's state directory (daemon.json, "
                   "gasoline.pid)")
    p.add_argument("--api-key", default=os.environ.get("GASOLINE_API_KEY") or None,
                   help="for a daemon started with --api-key (default: $GASOLINE_API_KEY)")
    p.add_argument("--timeout", type=float, default=10.0 if command == "stop" else 3.0,
                   help="seconds to wait for the daemon")
    if command != "stop":
        p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _state_dir(arg: Path | None) -> Path:
    if arg is not None:
        return arg
    from gasoline.common import default_state_dir  # imports platformdirs

    return default_state_dir()


def _daemon_info(state_dir: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((state_dir / "daemon.json").read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def locate(opts: argparse.Namespace) -> tuple[str, dict[str, Any] | None]:
    """The daemon's base URL and its daemon.json (when that file describes this URL)."""
    info = _daemon_info(_state_dir(opts.state_dir))
    if opts.url:
        url = opts.url.rstrip("/")
    elif opts.port is not None:
        url = f"http://127.0.0.1:{opts.port}"
    elif info is not None and isinstance(info.get("url"), str):
        url = info["url"].rstrip("/")
    else:
        url = f"http://127.0.0.1:{DEFAULT_PORT}"
    if info is not None and str(info.get("url", "")).rstrip("/") != url \
            and not (opts.port is not None and info.get("port") == opts.port):
        info = None
    return url, info


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
    if getattr(opts, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print("\n".join(lines))


# -- status ----------------------------------------------------------------------------------


def status(argv: list[str]) -> int:
    opts = _parser("status").parse_args(argv)
    url, info = locate(opts)
    h = health(url, opts)
    if h is None:
        _out(opts, {"running": False, "url": url},
             [f"gasoline: no daemon answers at {url}"])
        return NOT_RUNNING
    clients = raw_clients if isinstance(raw_clients := h.get("clients"), dict) else {}
    listed = [c for c in clients.get("list", []) if isinstance(c, dict)]
    capture = raw_capture if isinstance(raw_capture := h.get("capture"), dict) else {}
    data = {"running": True, "url": url, "version": h.get("version"),
            "pid": (info or {}).get("pid"), "uptime_seconds": h.get("uptime_seconds"),
            "extension_connected": capture.get("extension_connected"),
            "pairing": capture.get("pairing"),
            "clients": listed}
    lines = [f"gasoline {h.get('version')} running at {url}"
             + (f" (pid {data['pid']})" if data["pid"] else ""),
             f"extension: {'connected' if data['extension_connected'] else 'not connected'}",
             f"clients: {len(listed)}"]
    pairing = capture.get("pairing") if isinstance(capture.get("pairing"), dict) else None
    if pairing:
        lines[2:2] = [f"daemon identity: {pairing.get('daemon_fingerprint')}",
                      f"pinned extension: {pairing.get('extension_fingerprint') or 'none yet'}"
                      + "".join(f"\nrefused extension: {fp} (gasoline pair accept {fp})"
                                for fp in pairing.get("refused_extensions") or [])]
    for c in listed:
        bits = [str(c.get(k)) for k in ("cwd", "state") if c.get(k)]
        lines.append(f"  {c.get('id') or c.get('client_id')}" + (f" ({', '.join(bits)})"
                                                                 if bits else ""))
    _out(opts, data, lines)
    return 0


# -- doctor ----------------------------------------------------------------------------------


def _ask_doctor(url: str, opts: argparse.Namespace) -> dict[str, Any] | None:
    """C{configure {what:"doctor"}} as one stateless MCP request; its JSON, or None."""
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "configure", "arguments": {"what": "doctor"}}}
    try:
        status_code, body = _request(url + "/mcp", opts, message, {
            "X-Gasoline-Client": DOCTOR_CLIENT, "X-Gasoline-Connection": f"cli-{os.getpid()}",
            "MCP-Protocol-Version": STATELESS_VERSION})
    except (OSError, ValueError):
        return None
    try:
        text = body["result"]["content"][0]["text"]
        return json.loads(text.partition("\n")[2])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def doctor(argv: list[str]) -> int:
    opts = _parser("doctor").parse_args(argv)
    url, _ = locate(opts)
    state_dir = _state_dir(opts.state_dir)
    checks: list[dict[str, Any]] = []
    probe = state_dir if state_dir.is_dir() else state_dir.parent
    writable = os.access(probe, os.W_OK) if probe.exists() else False
    checks.append({"check": "state_dir", "status": "ok" if writable else "fail",
                   "detail": f"{state_dir} {'is' if writable else 'is not'} writable",
                   **({} if writable else {"fix": "Point --state-dir at a writable directory."})})
    h = health(url, opts)
    if h is None:
        checks.append({"check": "daemon", "status": "fail",
                       "detail": f"no Gasoline daemon answers at {url}",
                       "fix": "Start it (gasoline serve, or let an agent's gasoline connect "
                       "start it), or pass --port / --url."})
    else:
        checks.append({"check": "daemon", "status": "ok",
                       "detail": f"gasoline {h.get('version')} at {url}"})
        answer = _ask_doctor(url, opts)
        if answer is None:
            checks.append({"check": "doctor", "status": "fail",
                           "detail": "the daemon did not answer configure doctor",
                           "fix": "See the daemon's log (daemon.log in the state dir)."})
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
    _out(opts, {"url": url, "checks": checks, "ok": not failing}, lines)
    return 1 if failing else 0


# -- stop ------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (our own unreaped child, in tests) has exited
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def _looks_like_gasoline(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc here: trust the pid file
    return b"gasoline" in cmdline or b"twistd" in cmdline


def _pid_for(opts: argparse.Namespace, info: dict[str, Any] | None) -> tuple[int | None, str]:
    if info is not None and isinstance(info.get("pid"), int):
        return info["pid"], "daemon.json"
    pid_file = _state_dir(opts.state_dir) / "gasoline.pid"
    try:
        return int(pid_file.read_text().strip()), str(pid_file)
    except (OSError, ValueError):
        return None, ""


def stop(argv: list[str]) -> int:
    opts = _parser("stop").parse_args(argv)
    url, info = locate(opts)
    h = health(url, opts)
    if h is not None and isinstance(h.get("pid"), int):
        pid, source = h["pid"], f"{url}/health"  # the daemon on that port names itself
    else:
        pid, source = _pid_for(opts, info)
    if pid is None or not _alive(pid):
        if h is not None:
            print(f"gasoline: a daemon answers at {url} but no pid file names it "
                  "(pass --state-dir)", file=sys.stderr)
            return 1
        print(f"gasoline: no daemon running at {url}")
        return 0
    if not _looks_like_gasoline(pid):
        print(f"gasoline: pid {pid} (from {source}) is not a Gasoline daemon; not stopping it",
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


COMMANDS = {"doctor": doctor, "status": status, "stop": stop}
