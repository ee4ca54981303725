"""
The watchdog every child MCP server runs under (C{python -I -S _watchdog.py PPID GRACE -- CMD...}).

It makes the child's process group and keeps it from outliving the daemon:

  1. C{setsid()}: a new session and process group, led by the watchdog, so the daemon can signal
     the whole group (the server and anything it forks) with one C{killpg};
  2. C{prctl(PR_SET_PDEATHSIG, SIGTERM)}: the kernel sends it SIGTERM when the daemon dies, even
     by SIGKILL (checked against the daemon's pid afterwards, for a daemon that died first);
  3. forks the server with stdin/stdout/stderr inherited, then drops its own copies, so the
     server alone holds the pipes (closing stdin still means "exit" to it);
  4. on SIGTERM/SIGHUP: SIGTERM to the group, SIGKILL to the group after GRACE seconds;
  5. when the server exits, whatever ended it, it ends what the server left in the group
     (SIGTERM to each, SIGKILL to those left after GRACE seconds; Linux C{/proc}), then ends
     too, with the server's status. After a daemon crash the server often ends first (its stdin
     reads end of file) and this process may be gone before its SIGTERM handler runs, with no
     daemon left to SIGKILL the group: so nothing the server started outlives the daemon, not
     even a process that ignores SIGTERM. (The daemon still SIGKILLs the group once the process
     has ended, for systems without C{/proc}.)

Standard library only and no site-packages (C{-I -S}): it starts in a few milliseconds.
"""

import os
import signal
import sys
import time


def _group_members(group: int) -> list[int] | None:
    """The live processes other than this one in process group C{group} (Linux C{/proc}); None
    where that cannot be read."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    wanted = str(group).encode()
    found = []
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[2] == wanted and fields[0] not in (b"Z", b"X"):
            found.append(int(name))
    return found


def _clear_group(group: int, grace: float, stopping: list[int]) -> None:
    """SIGTERM every other process of the group, SIGKILL those left after C{grace} seconds;
    return once none is left."""
    others = _group_members(group)
    if others is None:  # no /proc: when stopping, the grace period's SIGKILL takes the group
        while stopping:
            time.sleep(0.05)
        return
    deadline = time.monotonic() + grace
    termed: set[int] = set()
    while others:
        late = time.monotonic() >= deadline
        for member in others:
            if late or member not in termed:
                try:
                    os.kill(member, signal.SIGKILL if late else signal.SIGTERM)
                except OSError:
                    pass
                termed.add(member)
        time.sleep(0.02)
        others = _group_members(group)


def main() -> None:
    parent, grace = int(sys.argv[1]), float(sys.argv[2])
    argv = sys.argv[4:]
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the daemon's stop path and stdin EOF remain
        pass
    if os.getppid() != parent:
        os._exit(70)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"gasoline: cannot run {argv[0]!r}: {e.strerror}\n".encode())
            os._exit(127)
    group = os.getpgid(0)
    stopping = []

    def stop(signum, frame):
        stopping.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            os.killpg(group, signal.SIGTERM)
        except OSError:
            pass
        signal.signal(signal.SIGALRM, lambda *a: os.killpg(group, signal.SIGKILL))
        signal.setitimer(signal.ITIMER_REAL, grace)

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(0)
    # The server is gone: what it left in the group goes now (5. above).
    _clear_group(group, grace, stopping)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if hasattr(os, "waitstatus_to_exitcode") else 1)


if __name__ == "__main__":
    main()
