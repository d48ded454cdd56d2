"""Job validation: user mistakes are InputErrors naming the problem."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import CheckpointHook, Job, PriorityClass


def test_kinds_and_gpu_thousandths() -> None:
    assert Job("a", gpus_per_task=0).kind == "cpu"
    assert Job("b", gpus_per_task=2, tasks=3).total_gpu_milli == 6000
    assert Job("c", gpu_milli=250).kind == "fractional"
    m = Job("d", mig_profile="3g.40gb", tasks=2)
    assert m.kind == "mig" and m.task_gpu_milli == 429 and m.total_gpu_milli == 858
    assert Job("e", gpu_models="V100M16|V100M32").gpu_models == frozenset({"V100M16", "V100M32"})
    assert Job("f", priority="inference").priority is PriorityClass.INFERENCE  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"job_id": ""}, "needs a job_id"),
        ({"tasks": 0}, "tasks must be >= 1"),
        ({"gpus_per_task": -1}, "gpus_per_task must be"),
        ({"gpu_milli": 1200}, "gpu_milli must be in 1..1000"),
        ({"gpus_per_task": 2, "gpu_milli": 500}, "only a one-GPU task"),
        ({"mig_profile": "9g.1gb"}, "unknown MIG profile"),
        ({"mig_profile": "1g.10gb", "gpus_per_task": 2}, "one instance per task"),
        ({"priority": "urgent"}, "priority must be one of"),
        ({"gpu_memory_mib": 0}, "gpu_memory_mib must be > 0"),
        ({"cpu_milli": 1.5}, "cpu_milli must be a whole number"),
        ({"tenant": ""}, "tenant must not be empty"),
    ],
)
def test_bad_jobs(kwargs: dict, problem: str) -> None:
    fields = {"job_id": "j", **kwargs}
    with pytest.raises(InputError, match=problem):
        Job(**fields)


def test_checkpoint_hooks() -> None:
    assert CheckpointHook("signal", "SIGUSR1").target == "SIGUSR1"
    assert CheckpointHook("url", "https://ckpt.local/job/1").kind == "url"
    Job("j", checkpoint=CheckpointHook("command", "/opt/ckpt.sh"), grace_period_s=120)
    with pytest.raises(InputError, match="signal must be a name"):
        CheckpointHook("signal", "usr1")
    with pytest.raises(InputError, match="http"):
        CheckpointHook("url", "ftp://x")
    with pytest.raises(InputError, match="kind must be"):
        CheckpointHook("email", "a@b")  # type: ignore[arg-type]
