"""Job validation: user mistakes are InputErrors naming the problem."""

from __future__ import annotations

import pytest

from gpuwarden.errors import InputError
from gpuwarden.scheduler import CheckpointHook, Job, NodeSpec, PriorityClass, Scheduler


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


def test_a_round_tries_each_refused_shape_once_and_names_each_job_in_its_reason() -> None:
    s = Scheduler([NodeSpec.uniform("n", 64000, 262144, 2, "H100")], "bestfit")
    for i in range(50):
        s.submit(Job(f"big{i}", gpus_per_task=4))  # never fits on 2 GPUs
    s.submit(Job("small", gpus_per_task=1))
    tried: list[str] = []
    allocate = s._allocate

    def counting(job: Job, **kw: bool):  # type: ignore[no-untyped-def]
        tried.append(job.job_id)
        return allocate(job, **kw)

    s._allocate = counting  # type: ignore[method-assign]
    decisions = s.schedule()
    assert tried == ["big0", "small"]
    assert [d.job_id for d in decisions] == [f"big{i}" for i in range(50)] + ["small"]
    for d in decisions[:50]:
        assert not d.placed and d.reason.startswith(f"job {d.job_id}: no node has 4 fitting")
    assert decisions[-1].placed
