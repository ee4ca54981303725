"""
The watchdog every child MCP server runs under
(C{python -I -S _watchdog.py PPID GRACE [cpu=SECONDS] [mem=BYTES] -- CMD...}).

It keeps the server and everything the server starts from outliving the daemon:

  1. C{setsid()}: a new session and process group, led by the watchdog, so the daemon can signal
     the whole group (the server and anything it forks) with one C{killpg};
  2. C{prctl(PR_SET_PDEATHSIG, SIGTERM)}: the kernel sends it SIGTERM when the daemon dies, even
     by SIGKILL (checked against the daemon's pid afterwards, for a daemon that died first);
  3. C{prctl(PR_SET_CHILD_SUBREAPER, 1)} (Linux >= 3.4): a descendant whose parent ends is
     re-parented to the watchdog instead of init, so a process that leaves the group
     (C{setsid}, a double fork: a "daemonised" grandchild) is still the watchdog's to end;
  4. forks the server with stdin/stdout/stderr inherited (and the server's C{cpu=} / C{mem=}
     limits as C{RLIMIT_CPU} / C{RLIMIT_DATA}), then drops its own copies, so the server alone
     holds the pipes (closing stdin still means "exit" to it);
  5. on SIGTERM/SIGHUP: SIGTERM to the group and to every descendant, SIGKILL to them after
     GRACE seconds; on SIGUSR1 (the daemon's "now": a child it gives up on), SIGKILL to them
     at once;
  6. when the server exits, whatever ended it, it ends what the server left behind: every
     descendant (Linux C{/proc}: the watchdog's process tree, which holds the detached ones
     thanks to 3.) and every other member of the group (SIGTERM to each, SIGKILL to those left
     after GRACE seconds), reaps them, then ends too, with the server's status (128 + the signal
     when a signal killed it). After a daemon
     crash the server often ends first (its stdin reads end of file) and this process may be
     gone before its SIGTERM handler runs, with no daemon left to SIGKILL the group: so nothing
     the server started outlives the daemon, not even a process that ignores SIGTERM or that
     left the group. (The daemon still SIGKILLs the group once the process has ended, for
     systems without C{/proc}.)

Without C{PR_SET_CHILD_SUBREAPER} or C{/proc} (not Linux) the process group is what is ended: a
descendant that calls C{setsid} there is not followed (C{docs/proxy.md}). The option C{portable}
takes that path on Linux too (tests force it there).

C{net=none} / C{net=loopback} (the server's C{network} policy): in the forked server, before it
runs, a network namespace of its own (Linux C{unshare(CLONE_NEWNET)}; where that needs a
privilege the daemon lacks, together with a user namespace mapping the daemon's own uid and gid,
so the server keeps its uid): with no interface up (C{none}: every connection fails) or with only
its own loopback up (C{loopback}). If that cannot be done the server does not run (exit 126, the
reason on stderr). C{--probe-net MODE} does it in a throw-away child and exits 0 when it works:
what the daemon asks at start-up before accepting a servers file that sets a policy.

Standard library only and no site-packages (C{-I -S}): it starts in a few milliseconds.
"""

import fcntl
import os
import resource
import signal
import socket
import struct
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: Where the process table is read (Linux); None: not read (the portable path: the option
#: C{portable} forces it on Linux, for tests; elsewhere the directory is simply missing).
PROC: str | None = "/proc"


def _table() -> dict[int, tuple[int, int]] | None:
    """pid -> (ppid, pgrp) of every live (non-zombie) process (Linux C{/proc}); None where that
    cannot be read."""
    if PROC is None:
        return None
    try:
        names = os.listdir(PROC)
    except OSError:
        return None
    table = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 2 and fields[0] not in (b"Z", b"X"):
            table[int(name)] = (int(fields[1]), int(fields[2]))
    return table


def _left_behind(group: int) -> list[int] | None:
    """The live processes other than this one in process group C{group} or below this process
    in the process tree; None where that cannot be read."""
    table = _table()
    if table is None:
        return None
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {pid for pid, (_, pgrp) in table.items() if pgrp == group}
    todo = list(children.get(me, ()))
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, ()))
    found |= seen
    found.discard(me)
    return sorted(found)


def _reap() -> None:
    """Collect every child of this process that has ended (re-parented ones included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0:
            return


def _signal_all(group: int, sig: int) -> None:
    """C{sig} to every other process of the group and below this one. Signalled one by one
    where C{/proc} tells who they are (a SIGKILL to the group would end this process before
    the detached ones, whose subreaper it is, and they would go to init); to the group
    otherwise."""
    others = _left_behind(group)
    if others is None:
        try:
            os.killpg(group, sig)
        except OSError:
            pass
        return
    for pid in others:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _clear(group: int, grace: float, stopping: list[int]) -> None:
    """SIGTERM every other process of the group and below this one, SIGKILL those left after
    C{grace} seconds (at once after SIGUSR1); return once none is left."""
    others = _left_behind(group)
    if others is None:  # no /proc: when stopping, the grace period's SIGKILL takes the group
        while stopping and signal.SIGUSR1 not in stopping:
            time.sleep(0.05)
        if signal.SIGUSR1 in stopping:
            _signal_all(group, signal.SIGKILL)
        return
    deadline = time.monotonic() + (0 if signal.SIGUSR1 in stopping else grace)
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
        _reap()
        others = _left_behind(group)
    _reap()


def _limits(options: list[str]) -> list[tuple[int, int, int]]:
    out = []
    for option in options:
        key, _, value = option.partition("=")
        if key == "cpu":
            # The soft limit sends SIGXCPU; the hard one, a second later, SIGKILL.
            out.append((resource.RLIMIT_CPU, int(value), int(value) + 1))
        elif key == "mem":
            # RLIMIT_DATA (Linux >= 4.7: the heap and private writable mappings) rather than
            # RLIMIT_AS: V8 and others reserve gigabytes of address space they never use.
            which = getattr(resource, "RLIMIT_DATA", resource.RLIMIT_AS)
            out.append((which, int(value), int(value)))
    return out


CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1


def _isolate_network(mode: str) -> None:
    """This process gets a network namespace of its own (see the module docstring); raise
    OSError when it cannot."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWNET) != 0:
        # Not privileged: a user namespace too, mapping our own ids (the server keeps its uid).
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"cannot make a network namespace: {os.strerror(err)}")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    if mode == "loopback":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            ifr = struct.pack("16sH14s", b"lo", 0, b"")
            flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))


def _probe(mode: str) -> None:
    """Exit 0 when a child can be given network policy C{mode}, else 1 (the reason on stderr)."""
    pid = os.fork()
    if pid == 0:
        try:
            _isolate_network(mode)
        except Exception as e:  # any reason: the policy cannot be enforced
            os.write(2, f"{e}\n".encode())
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    os._exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)


def linux_guards() -> bool:
    """C{PR_SET_PDEATHSIG} and C{PR_SET_CHILD_SUBREAPER} (3. and 4. above) where the C library
    has C{prctl} (Linux); False elsewhere (macOS, the BSDs: the daemon's stop path, its group
    kill and the server's stdin EOF remain)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError, ImportError):
        return False
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return True


def main() -> None:
    global PROC
    if sys.argv[1:2] == ["--probe-net"]:
        _probe(sys.argv[2])
    parent, grace = int(sys.argv[1]), float(sys.argv[2])
    split = sys.argv.index("--")
    options, argv = sys.argv[3:split], sys.argv[split + 1:]
    portable = "portable" in options  # the path of systems without prctl and /proc
    options = [o for o in options if o != "portable"]
    os.setsid()
    if portable:
        PROC = None
    else:
        linux_guards()
    if os.getppid() != parent:
        os._exit(70)
    limits = _limits(options) if options else []
    net = next((o.partition("=")[2] for o in options if o.startswith("net=")), "any")
    pid = os.fork()
    if pid == 0:
        if net != "any":
            try:
                _isolate_network(net)
            except Exception as e:
                os.write(2, f"gasoline: network {net!r} cannot be enforced: {e}\n".encode())
                os._exit(126)
        try:
            if limits:
                for which, soft, hard in limits:
                    resource.setrlimit(which, (soft, hard))
            os.execvp(argv[0], argv)
        except (OSError, ValueError) as e:
            os.write(2, f"gasoline: cannot run {argv[0]!r}: {e.strerror if isinstance(e, OSError) else e}\n"
                     .encode())
            os._exit(127)
    group = os.getpgid(0)
    stopping = []

    def stop(signum: int, frame: object) -> None:
        stopping.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        _signal_all(group, signal.SIGTERM)
        signal.signal(signal.SIGALRM, lambda *a: _signal_all(group, signal.SIGKILL))
        signal.setitimer(signal.ITIMER_REAL, grace)

    def kill(signum: int, frame: object) -> None:
        stopping.append(signum)
        _signal_all(group, signal.SIGKILL)

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    signal.signal(signal.SIGUSR1, kill)
    while True:
        try:
            # Any child: the server, or a descendant re-parented here (3.) that ended.
            ended, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(0)
        if ended == pid:
            break
    # The server is gone: what it left behind goes now (6. above).
    _clear(group, grace, stopping)
    # The server's status: its exit code, or 128 + the signal that killed it (as a shell says).
    if os.WIFSIGNALED(status):
        os._exit(128 + os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
