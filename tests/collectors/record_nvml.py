"""Record a node's NVML, as the real library answers it, into a fixture ``FakeNvml`` replays.

    python tests/collectors/record_nvml.py --description "H200 SXM, driver 580" > node.json

Run it on a node with NVIDIA GPUs (nvidia-ml-py installed). Every call the collector makes is
asked once per GPU; a call that fails is written as its NVML error name ("NOT_SUPPORTED"), which
the fake raises again, so a fixture keeps what the GPU does not support. The GPM ratios need two
samples: the recorder takes them ``--gpm-interval`` seconds apart. ``--per-step SECONDS`` reads
the energy counter twice that far apart and writes the increase as ``per_step``, so a replayed
node's energy grows the way the real one did between polls.

Nothing here writes to the GPU: it reads, and frees what it allocates.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

import fake_nvml  # this directory's: the fixture layout the recording is for
import pynvml

#: The NVML module asked (tests swap in the fake); errors and structures are pynvml's own.
NV: Any = pynvml

#: NVML return codes by value, for writing a failure as the name the fake raises again.
_ERROR_NAMES = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}
#: NVLink error counters by the fake's fixture key (its map, the other way round).
_NVLINK_COUNTERS = {key: counter for counter, key in fake_nvml._NVLINK_COUNTERS.items()}


def error_name(exc: pynvml.NVMLError) -> str:
    return _ERROR_NAMES.get(exc.value, "UNKNOWN")


def ask(call: Callable[[], Any]) -> Any:
    """The call's answer, or the NVML error's name when it fails."""
    try:
        return call()
    except pynvml.NVMLError as exc:
        return error_name(exc)


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _memory_temp(handle: Any) -> Any:
    entry = NV.nvmlDeviceGetFieldValues(handle, [NV.NVML_FI_DEV_MEMORY_TEMP])[0]
    if entry.nvmlReturn != NV.NVML_SUCCESS:
        return _ERROR_NAMES.get(entry.nvmlReturn, "UNKNOWN")
    kinds = {
        NV.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        NV.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        NV.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        NV.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    }
    return int(getattr(entry.value, kinds.get(entry.valueType, "uiVal")))


def _memory(handle: Any, missing: list[str]) -> Any:
    try:
        mem = NV.nvmlDeviceGetMemoryInfo(handle, version=NV.nvmlMemory_v2)
        return {"total": mem.total, "reserved": mem.reserved, "used": mem.used, "free": mem.free}
    except pynvml.NVMLError as exc:
        v2_error = error_name(exc)
        if v2_error == "FUNCTION_NOT_FOUND":
            missing.append("nvmlDeviceGetMemoryInfo_v2")
    try:  # v1 only: the driver's reserve is counted as used, and the fake adds ``reserved``
        mem = NV.nvmlDeviceGetMemoryInfo(handle)
        return {"total": mem.total, "reserved": 0, "used": mem.used, "free": mem.free}
    except pynvml.NVMLError:
        return v2_error


def _retired(handle: Any) -> Any:
    pages: dict[str, list[str]] = {}
    for key, cause in (
        ("sbe", NV.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ("dbe", NV.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    ):
        answer = ask(lambda c=cause: NV.nvmlDeviceGetRetiredPages(handle, c))
        if isinstance(answer, str):
            return answer
        pages[key] = [f"0x{address:x}" for address in answer]
    return pages


def _nvlink(handle: Any) -> Any:
    """The links that answer, their error counters (only those not zero) and the links down."""
    links, down = 0, []
    errors: dict[str, dict[str, int]] = {}
    first_error = None
    for link in range(NV.NVML_NVLINK_MAX_LINKS):
        state = ask(lambda n=link: NV.nvmlDeviceGetNvLinkState(handle, n))
        if isinstance(state, str):
            first_error = first_error or state
            break
        links = link + 1
        if not state:
            down.append(link)
        for key, counter in _NVLINK_COUNTERS.items():
            count = ask(lambda n=link, c=counter: NV.nvmlDeviceGetNvLinkErrorCounter(handle, n, c))
            if isinstance(count, int) and count:
                errors.setdefault(key, {})[str(link)] = count
    if links == 0:
        return first_error or "NOT_SUPPORTED"
    out: dict[str, Any] = {"links": links, "errors": errors}
    if down:
        out["down"] = down
    return out


def _violations(handle: Any) -> Any:
    out: dict[str, Any] = {}
    for key, policy in (
        ("power", NV.NVML_PERF_POLICY_POWER),
        ("thermal", NV.NVML_PERF_POLICY_THERMAL),
    ):
        answer = ask(lambda p=policy: NV.nvmlDeviceGetViolationStatus(handle, p))
        if isinstance(answer, str):
            out[key] = answer
        else:
            out["reference"] = int(answer.referenceTime)
            out[key] = int(answer.violationTime)
    if "reference" not in out:
        return out.get("power", "NOT_SUPPORTED")
    return out


def _clock_table(handle: Any) -> Any:
    mems = ask(lambda: NV.nvmlDeviceGetSupportedMemoryClocks(handle))
    if isinstance(mems, str):
        return mems
    table: dict[str, list[int]] = {}
    for mem in mems:
        graphics = ask(lambda m=mem: NV.nvmlDeviceGetSupportedGraphicsClocks(handle, m))
        if not isinstance(graphics, str):
            table[str(mem)] = sorted(int(g) for g in graphics)
    return table


def _gpm(handle: Any, interval_s: float) -> dict[str, Any] | None:
    """The GPM ratios over ``interval_s``; None when the GPU has no GPM (pre-Hopper)."""
    support = ask(lambda: NV.nvmlGpmQueryDeviceSupport(handle))
    if isinstance(support, str) or not support.isSupportedDevice:
        return None
    samples = [NV.nvmlGpmSampleAlloc(), NV.nvmlGpmSampleAlloc()]
    try:
        first = ask(lambda: NV.nvmlGpmSampleGet(handle, samples[0]))
        if isinstance(first, str):
            return {"graphics_util_pct": first, "any_tensor_util_pct": first}
        time.sleep(interval_s)
        second = ask(lambda: NV.nvmlGpmSampleGet(handle, samples[1]))
        if isinstance(second, str):
            return {"graphics_util_pct": second, "any_tensor_util_pct": second}
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = NV.NVML_GPM_METRICS_GET_VERSION
        request.sample1, request.sample2 = samples
        keys = {
            "graphics_util_pct": NV.NVML_GPM_METRIC_GRAPHICS_UTIL,
            "any_tensor_util_pct": NV.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        }
        request.numMetrics = len(keys)
        for i, metric in enumerate(keys.values()):
            request.metrics[i].metricId = metric
        answer = ask(lambda: NV.nvmlGpmMetricsGet(request))
        if isinstance(answer, str):
            return dict.fromkeys(keys, answer)
        out: dict[str, Any] = {}
        for i, key in enumerate(keys):
            entry = answer.metrics[i]
            ok = entry.nvmlReturn == NV.NVML_SUCCESS
            out[key] = round(float(entry.value), 3) if ok else _ERROR_NAMES.get(entry.nvmlReturn)
        return out
    finally:
        for sample in samples:
            ask(lambda s=sample: NV.nvmlGpmSampleFree(s))


def _xid_events_supported(handle: Any) -> bool:
    event_set = NV.nvmlEventSetCreate()
    try:
        answer = ask(
            lambda: NV.nvmlDeviceRegisterEvents(handle, NV.nvmlEventTypeXidCriticalError, event_set)
        )
        return not isinstance(answer, str)
    finally:
        ask(lambda: NV.nvmlEventSetFree(event_set))


def record_device(handle: Any, gpm_interval_s: float) -> dict[str, Any]:
    def get(function: str, *args: Any) -> Any:
        return ask(lambda: getattr(NV, function)(handle, *args))

    missing: list[str] = []  # functions this driver lacks: the fake raises FunctionNotFound
    util = get("nvmlDeviceGetUtilizationRates")
    reasons = get("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons == "FUNCTION_NOT_FOUND":  # drivers before 535 name it "throttle reasons"
        missing.append("nvmlDeviceGetCurrentClocksEventReasons")
        reasons = get("nvmlDeviceGetCurrentClocksThrottleReasons")
    pci = get("nvmlDeviceGetPciInfo")
    dev: dict[str, Any] = {
        "uuid": _text(get("nvmlDeviceGetUUID")),
        "pci_bus_id": pci if isinstance(pci, str) else _text(pci.busId),
        "name": _text(get("nvmlDeviceGetName")),
        "temperature_gpu_c": get("nvmlDeviceGetTemperature", NV.NVML_TEMPERATURE_GPU),
        "memory_temp_c": _memory_temp(handle),
        "power_usage_mw": get("nvmlDeviceGetPowerUsage"),
        "enforced_power_limit_mw": get("nvmlDeviceGetEnforcedPowerLimit"),
        "power_limit_mw": get("nvmlDeviceGetPowerManagementLimit"),
        "power_limit_constraints_mw": ask(
            lambda: list(NV.nvmlDeviceGetPowerManagementLimitConstraints(handle))
        ),
        "total_energy_mj": get("nvmlDeviceGetTotalEnergyConsumption"),
        "clock_sm_mhz": get("nvmlDeviceGetClockInfo", NV.NVML_CLOCK_SM),
        "clock_mem_mhz": get("nvmlDeviceGetClockInfo", NV.NVML_CLOCK_MEM),
        "utilization_pct": util
        if isinstance(util, str)
        else {"gpu": util.gpu, "memory": util.memory},
        "memory_bytes": _memory(handle, missing),
        "ecc": {
            f"{kind}_{scope}": get(
                "nvmlDeviceGetTotalEccErrors",
                getattr(NV, f"NVML_MEMORY_ERROR_TYPE_{kind.upper()}"),
                getattr(NV, f"NVML_{scope.upper()}_ECC"),
            )
            for kind in ("corrected", "uncorrected")
            for scope in ("volatile", "aggregate")
        },
        "retired_pages": _retired(handle),
        "retired_pages_pending": get("nvmlDeviceGetRetiredPagesPendingStatus"),
        "remapped_rows": ask(
            lambda: dict(
                zip(
                    ("correctable", "uncorrectable", "pending", "failure"),
                    NV.nvmlDeviceGetRemappedRows(handle),
                    strict=True,
                )
            )
        ),
        "pcie_replay_counter": get("nvmlDeviceGetPcieReplayCounter"),
        "pcie_link": {
            "gen": get("nvmlDeviceGetCurrPcieLinkGeneration"),
            "gen_max": get("nvmlDeviceGetMaxPcieLinkGeneration"),
            "width": get("nvmlDeviceGetCurrPcieLinkWidth"),
            "width_max": get("nvmlDeviceGetMaxPcieLinkWidth"),
        },
        "nvlink": _nvlink(handle),
        "violation_ns": _violations(handle),
        "clocks_event_reasons": reasons,
        "supported_clocks_mhz": _clock_table(handle),
        "app_clocks_mhz": {
            "mem": get("nvmlDeviceGetApplicationsClock", NV.NVML_CLOCK_MEM),
            "sm": get("nvmlDeviceGetApplicationsClock", NV.NVML_CLOCK_SM),
        },
        "xid_events_supported": _xid_events_supported(handle),
    }
    if missing:
        dev["missing_functions"] = missing
    if isinstance(dev["supported_clocks_mhz"], str):
        del dev["supported_clocks_mhz"]  # the fake answers NOT_SUPPORTED without a table
    if any(isinstance(v, str) for v in dev["app_clocks_mhz"].values()):
        del dev["app_clocks_mhz"]
    gpm = _gpm(handle, gpm_interval_s)
    if gpm is not None:
        dev["gpm"] = gpm
    return dev


def record(
    description: str, *, gpm_interval_s: float = 1.0, per_step_s: float = 0.0
) -> dict[str, Any]:
    NV.nvmlInit()
    try:
        handles = [NV.nvmlDeviceGetHandleByIndex(i) for i in range(NV.nvmlDeviceGetCount())]
        devices = [record_device(h, gpm_interval_s) for h in handles]
        if per_step_s > 0:
            time.sleep(per_step_s)
            for dev, handle in zip(devices, handles, strict=True):
                later = ask(lambda h=handle: NV.nvmlDeviceGetTotalEnergyConsumption(h))
                if isinstance(later, int) and isinstance(dev["total_energy_mj"], int):
                    dev["per_step"] = {"total_energy_mj": later - dev["total_energy_mj"]}
        return {
            "description": description,
            "host": socket.gethostname(),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "nvml_version": _text(ask(NV.nvmlSystemGetNVMLVersion)),
            "driver_version": _text(ask(NV.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": ask(NV.nvmlSystemGetCudaDriverVersion_v2),
            "devices": devices,
            "xid_events": [],
        }
    finally:
        NV.nvmlShutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--description", required=True, help="what the node is, for the fixture")
    ap.add_argument("--gpm-interval", type=float, default=1.0, help="seconds between GPM samples")
    ap.add_argument("--per-step", type=float, default=0.0, help="seconds for the energy step")
    args = ap.parse_args(argv)
    fixture = record(args.description, gpm_interval_s=args.gpm_interval, per_step_s=args.per_step)
    json.dump(fixture, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
