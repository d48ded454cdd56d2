"""The agent's task table giving real task processes their GPU share: MIG instances through the
fake NVML (created, handed over as MIG-... UUIDs, destroyed, reconciled after a restart) and MPS
through a stand-in for ``nvidia-cuda-mps-control`` (a script that keeps the daemon's state in
its pipe directory and records each command, as the real program cannot run without a GPU)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collectors"))
from fake_nvml import load_fixture  # noqa: E402  (tests/collectors, by path)
from fake_nvml_mig import FakeMigNvml  # noqa: E402
from service_helpers import until_state  # noqa: E402  (this directory's helpers)

from gpuwarden.scheduler._agent_sharing import GpuSharing  # noqa: E402
from gpuwarden.scheduler._agent_tasks import TaskTable  # noqa: E402

#: nvidia-cuda-mps-control's command surface: ``-d`` starts the daemon (and returns), commands
#: on stdin talk to it, and with no daemon behind the pipe the client says so and fails.
MPS_CONTROL = """#!{python}
import json, os, sys
pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
marker = os.path.join(pipe, "control")
args = sys.argv[1:]
command = " ".join(args) if args else sys.stdin.read().strip()
with open({record!r}, "a") as f:
    f.write(json.dumps({{"command": command, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "pipe": pipe, "log": os.environ["CUDA_MPS_LOG_DIRECTORY"]}}) + "\\n")
if args == ["-d"]:
    if {fail_start}:
        print("nvidia-cuda-mps-control: cannot open the GPU"); sys.exit(1)
    if os.path.exists(marker):
        print("An instance of this daemon is already running"); sys.exit(1)
    open(marker, "w").write("up"); sys.exit(0)
if not os.path.exists(marker):
    print("Cannot find MPS control daemon process"); sys.exit(1)
if command == "quit":
    os.remove(marker)
sys.exit(0)
"""

SHOW_ENV = (
    "import os, json; print(json.dumps({k: v for k, v in os.environ.items() "
    "if k.startswith('CUDA_')}), flush=True); import time; time.sleep(float(os.environ.get('HOLD', '0')))"
)


def _mps_control(tmp_path: Path, *, fail_start: bool = False) -> tuple[str, Path]:
    record = tmp_path / "mps-commands.jsonl"
    script = tmp_path / "nvidia-cuda-mps-control"
    script.write_text(MPS_CONTROL.format(python=sys.executable, record=str(record),
                                         fail_start=fail_start))  # fmt: skip
    script.chmod(0o755)
    return str(script), record


def _commands(record: Path) -> list[tuple[str, str]]:
    if not record.exists():
        return []
    return [(e["command"], e["gpu"]) for e in map(json.loads, record.read_text().splitlines())]


def _order(job: str, gpus: list[int], hold_s: float = 0.0, **share: object) -> dict:
    return {"job_id": job, "attempt": 1, "task": 0, "gpus": gpus, "gpu_milli": 1000,
            "command": [sys.executable, "-c", SHOW_ENV], "env": {"HOLD": str(hold_s)}, **share}  # fmt: skip


def _env_of(table: TaskTable, key: tuple) -> dict[str, str]:
    text = Path(table.tasks[key].log).read_text()
    return json.loads(text.splitlines()[0])


def test_mps_daemon_per_gpu_client_limits_and_stop_after_the_last_task(tmp_path):
    binary, record = _mps_control(tmp_path)
    sharing = GpuSharing(tmp_path, gpu_memory_mib={0: 81920, 1: 81920}, mps_control=binary)
    table = TaskTable(tmp_path, sharing=sharing, n_gpus=2)
    table.start(_order("a", [1], hold_s=30, sharing="mps", gpu_milli=250))
    table.start(_order("b", [1], sharing="mps", gpu_milli=500, gpu_memory_mib=10000))
    table.start(_order("c", [0], sharing="time-slice", gpu_milli=500))
    until_state(table, ("b", 1, 0), "exited")
    until_state(table, ("c", 1, 0), "exited")
    a, b, c = (_env_of(table, (k, 1, 0)) for k in "abc")
    assert a["CUDA_VISIBLE_DEVICES"] == "1" and a["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"  # a quarter of 80 GiB
    assert b["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert b["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=10000M"  # its declared GPU memory
    assert a["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "gpu1" / "pipe")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in c and c["CUDA_VISIBLE_DEVICES"] == "0"
    starts = [c for c in _commands(record) if c[0] == "-d"]
    assert starts == [("-d", "1")]  # one daemon, for GPU 1 only, though two MPS tasks came
    assert ("quit", "1") not in _commands(record)  # task a still runs on it
    table.stop({"job_id": "a", "attempt": 1, "task": 0})
    until_state(table, ("a", 1, 0), "exited")
    assert _commands(record)[-1] == ("quit", "1")
    assert not sharing.mps.running(1)


def test_an_mps_daemon_that_will_not_start_fails_the_task_with_its_reason(tmp_path):
    binary, _ = _mps_control(tmp_path, fail_start=True)
    table = TaskTable(tmp_path, sharing=GpuSharing(tmp_path, mps_control=binary), n_gpus=1)
    table.start(_order("a", [0], sharing="mps", gpu_milli=300))
    task = table.tasks[("a", 1, 0)]
    assert task.state == "exited" and task.exit_code == 126 and task.pid is None
    assert "cannot open the GPU" in Path(task.log).read_text()
    missing = TaskTable(tmp_path / "m", sharing=GpuSharing(tmp_path / "m", mps_control="/no/mps"))
    missing.start(_order("b", [0], sharing="mps", gpu_milli=300))
    assert "no MPS control program '/no/mps'" in Path(missing.tasks[("b", 1, 0)].log).read_text()


def _h100(gpus: int = 2) -> FakeMigNvml:
    fixture = load_fixture("h100_hgx_8gpu.json")
    fixture["devices"] = fixture["devices"][:gpus]
    return FakeMigNvml(fixture)


def test_mig_task_gets_its_instance_uuid_and_the_instance_goes_with_it(tmp_path):
    nv = _h100()
    sharing = GpuSharing(tmp_path, nvml=nv, gpu_model="NVIDIA H100 80GB HBM3")
    table = TaskTable(tmp_path, sharing=sharing, n_gpus=2)
    table.start(_order("m", [1], mig="3g.40gb", mig_start=4))
    until_state(table, ("m", 1, 0), "exited")
    env = _env_of(table, ("m", 1, 0))
    assert env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
    assert nv.gpu_instances(1) == []  # destroyed once the task ended
    assert json.loads((tmp_path / "mig-instances.json").read_text()) == {}
    # NVML refusing: the task fails with NVML's reason and starts no process
    nv.root = False
    table.start(_order("n", [0], mig="1g.10gb", mig_start=0))
    task = table.tasks[("n", 1, 0)]
    assert task.exit_code == 126 and "NVMLError_NoPermission" in Path(task.log).read_text()
    fake_gpus = TaskTable(tmp_path / "f", sharing=GpuSharing(tmp_path / "f"), n_gpus=1)
    fake_gpus.start(_order("f", [0], mig="1g.10gb", mig_start=0))
    assert "cannot create MIG instances" in Path(fake_gpus.tasks[("f", 1, 0)].log).read_text()


def test_an_in_use_instance_is_destroyed_once_its_processes_are_gone(tmp_path):
    nv = _h100()
    table = TaskTable(tmp_path, sharing=GpuSharing(tmp_path, nvml=nv, gpu_model="H100-80GB"))
    table.start(_order("m", [0], mig="2g.20gb", mig_start=2))
    gi_id = table.sharing.mig.devices["m.1.0"].gi_id  # type: ignore[union-attr]
    nv.busy_instances.add((0, gi_id))  # a child the task left behind still holds the instance
    until_state(table, ("m", 1, 0), "exited")
    assert nv.gpu_instances(0) == [("2g.20gb", 2, 1)] and not table.tasks[("m", 1, 0)].released
    nv.busy_instances.clear()
    table.poll()
    assert nv.gpu_instances(0) == [] and table.tasks[("m", 1, 0)].released


def test_a_restarted_agent_adopts_running_mig_tasks_and_cleans_up_the_rest(tmp_path):
    nv = _h100()
    binary, record = _mps_control(tmp_path)
    first = TaskTable(tmp_path, sharing=GpuSharing(tmp_path, nvml=nv, gpu_model="H100-80GB",
                                                   mps_control=binary), n_gpus=2)  # fmt: skip
    first.start(_order("keep", [0], hold_s=30, mig="4g.40gb", mig_start=0))
    first.start(_order("mps", [1], hold_s=30, sharing="mps", gpu_milli=500))
    kept = first.sharing.mig.devices["keep.1.0"]  # type: ignore[union-attr]
    # an orphan: an instance nobody recorded (made by hand, or the agent died mid-create)
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, nv.c_nvmlGpuInstancePlacement_t(6, 1))
    # the MPS task ends while no agent watches
    os.killpg(first.tasks[("mps", 1, 0)].pid, 15)  # type: ignore[arg-type]
    time.sleep(0.5)
    again = TaskTable(tmp_path, sharing=GpuSharing(tmp_path, nvml=nv, gpu_model="H100-80GB",
                                                   mps_control=binary), n_gpus=2)  # fmt: skip
    assert nv.gpu_instances(0) == [("4g.40gb", 0, 1)]  # the orphan is gone, the task's is kept
    assert again.sharing.mig.devices["keep.1.0"] == kept  # type: ignore[union-attr]
    until_state(again, ("mps", 1, 0), "exited")
    assert _commands(record)[-1] == ("quit", "1")
    again.stop({"job_id": "keep", "attempt": 1, "task": 0})
    until_state(again, ("keep", 1, 0), "exited")
    assert nv.gpu_instances(0) == []


def test_end_to_end_a_service_places_shares_and_the_agent_sets_them_up(tmp_path):
    """Real HTTP service, real agent: an MPS share, a MIG instance, and a CUDA 13 job that
    waits with its reason because the node's R570 driver runs CUDA 12.8."""
    import httpx
    from service_helpers import AGENT_SECRET, agent_token

    from gpuwarden.scheduler._auth import TokenBook
    from gpuwarden.scheduler.agent import Agent, Inventory, host_inventory
    from gpuwarden.scheduler.api import SchedulerServer
    from gpuwarden.scheduler.service import SchedulerService
    from gpuwarden.scheduler.state import SchedulerDB

    db = SchedulerDB(tmp_path / "s.db")
    server = SchedulerServer(SchedulerService(db),
                             TokenBook({"team-a": "token-of-team-a"}, agent=AGENT_SECRET)).start(port=0)  # fmt: skip
    team = httpx.Client(
        base_url=server.url, headers={"Authorization": "Bearer token-of-team-a"}, timeout=10
    )
    binary, record = _mps_control(tmp_path)
    inv = host_inventory("n1", fake_gpus=2, gpu_model="H100-80GB",
                         versions=("570.124.06", "12.8"))  # fmt: skip
    inv = Inventory(inv.cpu_milli, inv.memory_mib,
                    (inv.gpus[0], {**inv.gpus[1], "mode": "mig"}))  # fmt: skip
    nv = _h100()
    sharing = GpuSharing(tmp_path / "agent", nvml=nv, gpu_model="H100-80GB",
                         gpu_memory_mib={0: 81920, 1: 81920}, mps_control=binary)  # fmt: skip
    agent = Agent("n1", server.url, tmp_path / "agent", inv, token=agent_token("n1"),
                  interval_s=0.05, sharing=sharing)  # fmt: skip
    try:
        agent.step()  # registers
        command = [sys.executable, "-c", SHOW_ENV]
        ids = {}
        for name, extra in (("mps", {"gpu_milli": 250, "sharing": "mps", "min_cuda": "12.4"}),
                            ("mig", {"mig_profile": "3g.40gb"}),
                            ("cuda13", {"min_cuda": "13.0"})):  # fmt: skip
            r = team.post("/v1/jobs", json={"name": name, "command": command, **extra})
            assert r.status_code in (200, 201), r.text
            ids[name] = r.json()["job_id"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            agent.step()
            states = {n: team.get(f"/v1/jobs/{i}").json()["state"] for n, i in ids.items()}
            if states["mps"] == states["mig"] == "succeeded":
                break
            time.sleep(0.05)
        assert states["mps"] == states["mig"] == "succeeded", states
        mps_env = json.loads(team.get(f"/v1/jobs/{ids['mps']}/logs").text.splitlines()[0])
        assert mps_env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert mps_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
        mig_env = json.loads(team.get(f"/v1/jobs/{ids['mig']}/logs").text.splitlines()[0])
        assert mig_env["CUDA_VISIBLE_DEVICES"].startswith("MIG-")
        agent.step()
        assert nv.gpu_instances(1) == [] and ("quit", "0") in _commands(record)
        waiting = team.get(f"/v1/jobs/{ids['cuda13']}").json()
        assert waiting["state"] == "queued"
        assert "driver 570.124.06 runs CUDA 12.8, job needs 13.0" in waiting["reason"]
    finally:
        agent.close()
        team.close()
        server.stop()
        db.close()


def test_mig_gpus_are_registered_in_mig_mode_and_a_gpu_the_node_lacks_is_refused(tmp_path):
    from click.testing import CliRunner

    from gpuwarden.cli import main
    from gpuwarden.scheduler.agent import host_inventory, with_mig

    inv = host_inventory("n1", fake_gpus=3, gpu_model="H100-80GB")
    assert [g.get("mode") for g in with_mig(inv, "0,2").gpus] == ["mig", None, "mig"]
    assert {g.get("mode") for g in with_mig(inv, "all").gpus} == {"mig"}
    assert with_mig(inv, "") == inv
    got = CliRunner().invoke(main, ["agent", "--node", "n1", "--fake-gpus", "2", "--mig-gpus",
                                    "1,5", "--workdir", str(tmp_path)])  # fmt: skip
    assert got.exit_code != 0 and "--mig-gpus names GPU [5] this node lacks" in got.output
