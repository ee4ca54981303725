"""
The watchdog every child MCP server runs under (C{python -I -S _watchdog.py PPID GRACE -- CMD...}).

It makes the child's process group and keeps it from outliving the daemon:

  1. C{setsid()}: a new session and process group, led by the watchdog, so the daemon can signal
     the whole group (the server and anything it forks) with one C{killpg};
  2. C{prctl(PR_SET_PDEATHSIG, SIGTERM)}: the kernel sends it SIGTERM when the daemon dies, even
     by SIGKILL (checked against the daemon's pid afterwards, for a daemon that died first);
  3. forks the server with stdin/stdout/stderr inherited, then drops its own copies, so the
     server alone holds the pipes (closing stdin still means "exit" to it);
  4. on SIGTERM/SIGHUP: SIGTERM to the group, SIGKILL to the group after GRACE seconds. When
     the server exits it ends too, with the server's status; the daemon then SIGKILLs the group,
     for anything the server left behind. If it was told to stop (the daemon died, or asked),
     there may be no daemon left to do that: it first waits until nothing else is left in the
     group, or until the grace period is over and the SIGKILL takes the group (itself included),
     so not even a process that ignores SIGTERM outlives the daemon.

Standard library only and no site-packages (C{-I -S}): it starts in a few milliseconds.
"""

import os
import signal
import sys
import time


def _others_in_group(group: int) -> bool:
    """Whether a live process other than this one is in process group C{group} (Linux C{/proc};
    elsewhere C{True}: the grace period's SIGKILL decides)."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
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
        if len(fields) > 2 and fields[2] == str(group).encode() and fields[0] != b"Z":
            return True
    return False


def main() -> None:
    parent, grace = int(sys.argv[1]), float(sys.argv[2])
    argv = sys.argv[4:]
    os.setsid()
    try:
        import ctypes  # noqa: PLC0415

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
    # The server is gone; the daemon signals whatever it left in the group (processEnded), if
    # there is still a daemon: when told to stop, wait for the group (SIGKILL at the deadline).
    while stopping and _others_in_group(group):
        time.sleep(0.02)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF if hasattr(os, "waitstatus_to_exitcode") else 1)


if __name__ == "__main__":
    main()
