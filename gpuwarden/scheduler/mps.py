"""CUDA MPS on a node: one MPS control daemon per GPU that runs MPS shares, and the limits each
client task gets from its share.

The agent starts ``nvidia-cuda-mps-control -d`` for a GPU when the first MPS task is placed on
it, with ``CUDA_VISIBLE_DEVICES`` naming that GPU alone and its own
``CUDA_MPS_PIPE_DIRECTORY`` / ``CUDA_MPS_LOG_DIRECTORY`` under ``WORKDIR/mps/gpuN`` (so daemons
of different GPUs never meet), and sends it ``quit`` when the last one ends. Each client task
gets the same two directories, so its CUDA runtime finds that GPU's daemon, and (NVIDIA's MPS
documentation, "Volta MPS Execution Resource Provisioning" and "Memory Limits"):

    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE   its share of the GPU's SMs, percent, rounded up
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT    "0=<MiB>M": device 0 of what the client sees, its
                                        declared GPU memory, else its share of the framebuffer

Whether a daemon runs is asked of the daemon itself (``get_server_list``, which fails with no
daemon behind the pipe), so a daemon started by an agent that has since restarted is found and
reused rather than started twice.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

from gpuwarden.errors import DeviceSetupError

logger = logging.getLogger("gpuwarden.scheduler.agent")

MPS_CONTROL = "nvidia-cuda-mps-control"


class MpsControl:
    """The MPS control daemons of one node's GPUs, under ``root``; ``binary``: the
    ``nvidia-cuda-mps-control`` to run (a path, or a name on ``PATH``)."""

    def __init__(self, root: Path, binary: str = MPS_CONTROL, *, timeout_s: float = 10.0) -> None:
        self.root = root
        self.binary = binary
        self.timeout_s = timeout_s

    def env(self, gpu: int) -> dict[str, str]:
        """The pipe and log directories of GPU ``gpu``'s daemon: its clients need the same."""
        base = self.root / f"gpu{gpu}"
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(base / "pipe"),
            "CUDA_MPS_LOG_DIRECTORY": str(base / "log"),
        }

    def running(self, gpu: int) -> bool:
        """Whether GPU ``gpu``'s daemon answers (``echo get_server_list | nvidia-cuda-mps-control``)."""
        if not Path(self.env(gpu)["CUDA_MPS_PIPE_DIRECTORY"]).is_dir():
            return False
        return self._run(gpu, [], "get_server_list\n").returncode == 0

    def start(self, gpu: int) -> None:
        """Start GPU ``gpu``'s daemon unless it runs; ``DeviceSetupError`` when it will not."""
        if self.running(gpu):
            return
        for d in self.env(gpu).values():
            Path(d).mkdir(parents=True, exist_ok=True)
        done = self._run(gpu, ["-d"], None)
        if done.returncode != 0:
            raise DeviceSetupError(
                f"{self.binary} -d for GPU {gpu} exited with {done.returncode}: "
                f"{_tail(done.stdout)}"
            )
        logger.warning("started the MPS control daemon of GPU %d", gpu)

    def stop(self, gpu: int) -> None:
        """Ask GPU ``gpu``'s daemon to quit (it ends its server once clients are gone)."""
        if not self.running(gpu):
            return
        done = self._run(gpu, [], "quit\n")
        if done.returncode != 0:
            logger.warning(
                "the MPS daemon of GPU %d did not take quit: %s", gpu, _tail(done.stdout)
            )
        else:
            logger.warning("stopped the MPS control daemon of GPU %d", gpu)

    def _run(self, gpu: int, args: list[str], stdin: str | None) -> _Done:
        """Run the control program for GPU ``gpu``. Its output goes to a file, not a pipe: with
        ``-d`` it forks a daemon that would hold a pipe open, and waiting for EOF would hang."""
        env = {**os.environ, **self.env(gpu), "CUDA_VISIBLE_DEVICES": str(gpu)}
        with tempfile.TemporaryFile("w+") as out:
            try:
                done = subprocess.run(
                    [self.binary, *args], input=stdin, env=env, stdout=out,
                    stderr=subprocess.STDOUT, text=True, timeout=self.timeout_s,
                    stdin=None if stdin is not None else subprocess.DEVNULL,
                )  # fmt: skip
            except FileNotFoundError as exc:
                raise DeviceSetupError(
                    f"no MPS control program {self.binary!r} on this node (--mps-control)"
                ) from exc
            except subprocess.TimeoutExpired as exc:
                raise DeviceSetupError(
                    f"{self.binary} for GPU {gpu} did not answer in {self.timeout_s:g} s"
                ) from exc
            out.seek(0)
            return _Done(done.returncode, out.read())


class _Done(NamedTuple):
    returncode: int
    stdout: str


def client_env(gpu_milli: int, memory_mib: float | None) -> dict[str, str]:
    """The MPS limits of a task holding ``gpu_milli`` thousandths of a GPU and ``memory_mib``
    of its memory (None: no memory limit, the GPU's size being unknown)."""
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, math.ceil(gpu_milli / 10)))}
    if memory_mib is not None and memory_mib > 0:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={int(memory_mib)}M"
    return env


def _tail(text: str | None) -> str:
    return (text or "").strip()[-300:] or "no output"


__all__ = ["MPS_CONTROL", "MpsControl", "client_env"]
