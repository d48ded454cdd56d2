"""Runs one node-agent task and writes its exit status to a file that outlives the agent.

    python -I -S _task_wrapper.py WORKDIR/tasks/j1.1.0 -- python train.py

A restarted agent cannot ``waitpid()`` a task its predecessor started, so the agent starts each
task through this script, as the leader of a new session. It first claims the launch by
creating ``STEM.pid`` (its pid and start time); a restarted agent that gave the launch up holds
that file already, and then the task is not started at all. It runs the command as its child in
its own process group, waits, and writes the status as ``Popen.returncode`` gives it (the exit
code, or -N for signal N) to ``STEM.exit``: written to a temporary file, fsynced, renamed.
Finally it ends the way the task did (the same code, or the same signal), so an agent that is
still its parent reads the same status either way.

The agent signals the whole process group (checkpoint hooks, SIGTERM, SIGKILL), which reaches
the task and its children directly, so this process only has to outlive those signals: it
catches every signal that would end it and does not forward them, because forwarding would
deliver each one twice (two checkpoints for one SIGUSR1). A signal that comes before the task
exists is passed on once it does. SIGKILL ends this process with the task: the agent that
started it still reads -9 from its child; a restarted one finds no file and reports "unknown".

Only the standard library, and run isolated (``-I -S``), so a tenant's PYTHONPATH cannot
replace it; the agent imports ``claim`` from here too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from types import FrameType

# synchronous faults (a Python handler would return to the faulting instruction forever), the
# uncatchable ones, and those that end nobody by default
_NOT_CAUGHT = frozenset(
    {
        signal.SIGKILL,
        signal.SIGSTOP,
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGFPE,
        signal.SIGILL,
        signal.SIGCHLD,
        signal.SIGCONT,
        signal.SIGURG,
        signal.SIGWINCH,
    }
)


def claim(path: str, text: str) -> bool:
    """Create ``path`` holding ``text`` unless it exists; exactly one of several racing
    claimants (this wrapper, a restarted agent) wins. ``os.link`` of a finished temporary
    file, so nobody ever reads a half-written claim."""
    tmp = f"{path}.{os.getpid()}.tmp"
    _write_synced(tmp, text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    _sync_dir(path)
    return True


def write_atomic(path: str, text: str) -> None:
    """Replace ``path`` by ``text``: a crash leaves the old file or the new one, on disk."""
    tmp = f"{path}.{os.getpid()}.tmp"
    _write_synced(tmp, text)
    os.replace(tmp, path)
    _sync_dir(path)


def _write_synced(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run(stem: str, command: list[str]) -> int:
    """Claim, run ``command``, record its status; returns it (-N for signal N)."""
    early: list[int] = []  # signals that came before the task existed
    child: list[subprocess.Popen[bytes]] = []

    def outlive(signum: int, frame: FrameType | None) -> None:
        if not child:
            early.append(signum)

    for sig in signal.valid_signals():
        if sig not in _NOT_CAUGHT:
            try:
                signal.signal(sig, outlive)  # a handler, not SIG_IGN: exec resets it in the task
            except (OSError, ValueError):  # signals the C library keeps for itself
                pass
    if not claim(f"{stem}.pid", json.dumps({"pid": os.getpid(), "started_at": time.time()})):
        print("gpuwarden agent: a restarted agent gave this launch up; not started", flush=True)
        return 1
    try:
        child.append(subprocess.Popen(command))  # same stdout, environment, cwd, process group
    except OSError as exc:  # no such program: the task fails, as a shell would say
        print(f"gpuwarden agent: cannot start {command[0]}: {exc}", flush=True)
        status = 127
    else:
        for signum in early:
            try:
                os.kill(child[0].pid, signum)
            except ProcessLookupError:
                pass
        status = child[0].wait()
    try:
        write_atomic(f"{stem}.exit", f"{status}\n")
    except OSError as exc:  # a full disk: an agent still our parent reads it from our own exit
        print(f"gpuwarden agent: cannot record the exit status {status}: {exc}", flush=True)
    return status


def _end_like(status: int) -> None:
    """Exit with ``status``, or die of the signal that ended the task."""
    if status < 0:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the task's core, if any, is enough
        try:
            signal.signal(-status, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), -status)
        status = 128 - status  # a signal that does not end a process: the shell's code
    sys.exit(status)


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: _task_wrapper.py STEM -- COMMAND [ARG...]")
    _end_like(run(argv[0], argv[2:]))


if __name__ == "__main__":
    main(sys.argv[1:])
