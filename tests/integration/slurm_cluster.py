"""A real Slurm cluster on 127.0.0.1 for tests: munged, slurmctld and one slurmd per node.

Recipe from /work/shared/INTEGRATION.md: a munge socket directory of mode 0711, several slurmd
on one host (multiple-slurmd), fake GPUs as device files. Every daemon is started in the
foreground (-D) by its own Popen and stopped by its PID. Clients (scontrol, sbatch, squeue) find
the cluster through ``env`` (SLURM_CONF).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

BINARIES = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch", "squeue", "sinfo")
FEATURE = "gpuwarden_healthy"


def require_slurm() -> None:
    """Skip when Slurm or munge is missing; fail instead when CI=true."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if not missing and Path("/etc/munge/munge.key").exists() and os.geteuid() == 0:
        return
    if missing or not Path("/etc/munge/munge.key").exists():
        what = ", ".join(missing) or "/etc/munge/munge.key"
        message = f"Slurm not installed (missing {what}): apt-get install -y slurm-wlm munge"
    else:  # SlurmUser=root and mknod for the fake GPUs
        message = "the test Slurm cluster runs as root"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}: CI=true, so integration tests may not skip")
    pytest.skip(message)


def _ports(n: int) -> list[int]:
    """``n`` distinct ports from this xdist worker's own block, as every other daemon the tests
    start takes them (a port the kernel hands out could be taken by another worker first)."""
    from alerting_daemons import free_port

    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class SlurmCluster:
    """``nodes`` fake nodes (2 CPUs, 2 fake GPUs each) carrying the ``gpuwarden_healthy``
    feature, one partition ``gpu`` with all of them."""

    def __init__(self, workdir: Path, nodes: Sequence[str] = ("node1", "node2", "node3")):
        self.workdir = workdir
        self.nodes = list(nodes)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conf = workdir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout_s: float = 40.0) -> SlurmCluster:
        require_slurm()
        w = self.workdir
        munge = w / "munge"
        munge.mkdir(mode=0o711, parents=True)
        os.chmod(munge, 0o711)  # 0700 fails: "Socket is inaccessible"
        shutil.copy("/etc/munge/munge.key", munge / "key")
        os.chmod(munge / "key", 0o600)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={munge / 'munge.socket.2'}",
                f"--key-file={munge / 'key'}",
                f"--log-file={munge / 'munged.log'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'seed'}",
            ],
        )
        self._wait(lambda: (munge / "munge.socket.2").exists(), "munged socket", 10)
        for d in ("state", "spool", "log", "dev"):
            (w / d).mkdir()
        ctld_port, *node_ports = _ports(1 + len(self.nodes))
        gres = []
        node_lines = []
        for name, port in zip(self.nodes, node_ports, strict=True):
            for g in range(2):
                dev = w / "dev" / f"{name}-gpu{g}"
                subprocess.run(["mknod", str(dev), "c", "1", "3"], check=True)
            gres.append(f"NodeName={name} Name=gpu File={w / 'dev'}/{name}-gpu[0-1]")
            node_lines.append(
                f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                f"CPUs=2 RealMemory=1000 Feature={FEATURE} Gres=gpu:2"
            )
        self.conf.write_text(
            "\n".join(
                [
                    "ClusterName=gpuwarden-test",
                    "SlurmctldHost=localhost",
                    f"SlurmctldPort={ctld_port}",
                    "AuthType=auth/munge",
                    f"AuthInfo=socket={munge / 'munge.socket.2'}",
                    "CredType=cred/munge",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    f"StateSaveLocation={w / 'state'}",
                    f"SlurmdSpoolDir={w / 'spool'}/%n",
                    f"SlurmctldPidFile={w / 'slurmctld.pid'}",
                    f"SlurmdPidFile={w / 'slurmd-%n.pid'}",
                    f"SlurmctldLogFile={w / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={w / 'log' / 'slurmd-%n.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core",
                    "ReturnToService=2",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "GresTypes=gpu",
                    "CommunicationParameters=NoInAddrAny",
                    "MpiDefault=none",
                    "SchedulerType=sched/backfill",
                    "SchedulerParameters=sched_interval=1,bf_interval=1",
                    "MessageTimeout=5",
                    *node_lines,
                    f"PartitionName=gpu Nodes={','.join(self.nodes)} Default=YES MaxTime=10 State=UP",
                    "",
                ]
            )
        )
        (w / "gres.conf").write_text("AutoDetect=off\n" + "\n".join(gres) + "\n")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.scontrol("ping").returncode == 0, "slurmctld", timeout_s)
        for name in self.nodes:
            (w / "spool" / name).mkdir()
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-f", str(self.conf), "-N", name])
        self._wait(self._all_idle, "every slurmd idle", timeout_s)
        return self

    # -- clients -------------------------------------------------------------------------

    def run(self, argv: Sequence[str], check: bool = False) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and out.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} failed: {out.stdout}{out.stderr}\n{self.logs()}"
            )
        return out

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(["scontrol", *args])

    def node(self, name: str) -> dict[str, str]:
        """``scontrol -o show node NAME`` as key -> value (Reason keeps its spaces)."""
        line = self.run(["scontrol", "-o", "show", "node", name], check=True).stdout.strip()
        head, sep, reason = line.partition(" Reason=")
        fields = dict(p.split("=", 1) for p in head.split() if "=" in p)
        if sep:
            fields["Reason"] = reason
        return fields

    def sleeper(self, seconds: int = 120) -> list[str]:
        """sbatch arguments for a job that holds its node for ``seconds``; it records its PID so
        ``stop`` can end it even if Slurm has already let go of it."""
        jobs = self.workdir / "jobs"
        jobs.mkdir(exist_ok=True)
        return [
            "-o",
            "/dev/null",
            "--wrap",
            f"echo $$ > {jobs}/$SLURM_JOB_ID.pid; exec sleep {seconds}",
        ]

    def sbatch(self, *args: str) -> str:
        out = self.run(["sbatch", "--parsable", *args], check=True)
        return out.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        line = self.run(["scontrol", "-o", "show", "job", job_id], check=True).stdout.strip()
        return dict(p.split("=", 1) for p in line.split() if "=" in p)

    def wait_job(self, job_id: str, states: set[str], timeout_s: float = 20.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} stayed {job.get('JobState')}: {job}")
            time.sleep(0.2)

    def logs(self) -> str:
        parts = []
        for f in sorted((self.workdir / "log").glob("*.log")):
            tail = f.read_text(errors="replace").splitlines()[-8:]
            parts.append(f"--- {f.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    # -- plumbing ------------------------------------------------------------------------

    def _all_idle(self) -> bool:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"])
        states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
        for name, state in states.items():
            if state.startswith("drain") or state == "down":
                self.scontrol("update", f"NodeName={name}", "State=RESUME")
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.out").open("wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        log.close()
        self.procs.append(proc)

    def _wait(self, ok, what: str, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while not ok():
            for p in self.procs:
                if p.poll() is not None:
                    raise AssertionError(f"{p.args[0]} exited with {p.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not ready after {timeout_s:g} s\n{self.logs()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.procs:
            # jobs still running keep slurmd busy on SIGTERM: cancel them and let them end
            self.run(["scancel", "--full", "--quiet", "--partition=gpu"])
            deadline = time.monotonic() + 10
            while self.run(["squeue", "-h"]).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.2)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.procs.clear()
        for pidfile in (self.workdir / "jobs").glob("*.pid"):
            _kill_sleeper(pidfile)


def _kill_sleeper(pidfile: Path) -> None:
    """End a test job's process that outlived its slurmd (by its recorded PID, if it is still
    that job's sleep)."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if cmdline.startswith(b"sleep"):
        os.kill(pid, signal.SIGKILL)
