"""Discovery backends beside NVML: AMD (ROCm), Intel XPU and Apple Silicon, behind one protocol.

A backend has a ``name`` and ``discover(env)``, which returns a :class:`BackendReport`: the devices
it found (:class:`~vramwise.gpus.discovery.GpuInfo`, with the backend, the visibility variable and
the physical index within the backend), which of them the process may use under that variable, and,
when it found none, one line saying why. A backend never raises: a missing tool or library, a tool
that fails, times out or prints what cannot be read is a line of its report.

Every external command goes through :func:`run_tool` (one small runner, bounded by ``TOOL_TIMEOUT_S``),
which tests and the doc builder replace; libraries (``amdsmi``, ``mlx``, ``torch.xpu``) are reached
through small loaders that tests replace the same way.

Sources of what each backend reads:

- AMD: the ``amdsmi`` Python library (``amdsmi_get_processor_handles``, ``amdsmi_get_gpu_asic_info``,
  ``amdsmi_get_gpu_memory_total`` / ``_usage`` with ``AmdSmiMemoryType.VRAM``; ROCm/amdsmi,
  docs/how-to/amdsmi-py-lib.md); else ``amd-smi static --asic --json`` (``asic.market_name``,
  ``asic.asic_serial``) and ``amd-smi metric --mem-usage --json`` (``mem_usage.total_vram`` /
  ``used_vram`` / ``free_vram`` as ``{"value": N, "unit": "MB"}``, MB = 2**20 bytes; ROCm/amdsmi,
  docs/how-to/amdsmi-cli-tool.md; newer releases wrap the list in ``{"gpu_data": [...]}``); else
  ``rocm-smi --showmeminfo vram --showproductname --json`` (``cardN``: ``VRAM Total Memory (B)``,
  ``VRAM Total Used Memory (B)``, ``Card Series``).
  Visibility as ROCm applies it (https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html
  and https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html):
  ``ROCR_VISIBLE_DEVICES`` (indices or ``GPU-<uuid>``) is applied first by the ROCm runtime to the
  physical devices; ``HIP_VISIBLE_DEVICES`` (or, when it is unset, ``CUDA_VISIBLE_DEVICES``, which
  HIP reads too) then indexes the devices ROCr left; the first invalid entry ends a list, as in CUDA.
- Intel: ``torch.xpu`` only where torch is already imported (discovery never imports torch:
  ``vramwise gpus`` and ``select`` stay light); else ``xpu-smi discovery -j`` (``device_list``:
  ``device_id``, ``device_name``, ``uuid``, ``memory_physical_size_byte``) and ``xpu-smi stats -d N -j``
  (``device_level``: ``XPUM_STATS_MEMORY_USED`` in MiB) (intel/xpumanager, doc/smi_user_guide.md).
  ``ZE_AFFINITY_MASK`` (Level Zero specification, "Affinity Mask",
  https://oneapi-src.github.io/level-zero-spec/level-zero/latest/core/PROG.html#affinity-mask): a
  comma list of ``device`` or ``device.subdevice`` indices; a device is visible when an entry names
  it; an empty mask hides nothing. Entries naming no device are taken as ignored (the specification
  does not say; vramwise reports them). The indices are read as xpu-smi's cards: under
  ``ZE_FLAT_DEVICE_HIERARCHY=FLAT`` a multi-tile card's tiles are devices of their own, which this
  reading does not model.
- Apple Silicon (macOS on arm64): ``sysctl -n hw.memsize`` (bytes); the GPU's recommended working set
  from MLX ``mx.metal.device_info()["max_recommended_working_set_size"]`` where MLX is installed
  (ml-explore/mlx, python/mlx/core/metal.pyi), which follows ``iogpu.wired_limit_mb`` when it is set;
  else ``sysctl -n iogpu.wired_limit_mb`` where it is above 0 (0 means the OS default); else the OS
  default share, :func:`apple_default_working_set`: the GPU catalog's rule ``macos-working-set``
  (hardware/gpus.yaml, ``unified_budgets``, with its sources), the one ``fit`` budgets a Mac of the
  catalog by. The device is marked ``unified``; there is no visibility variable.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from vramwise.gpus.device import BackendReport, GpuInfo, parse_visible_list

__all__ = [
    "TOOL_TIMEOUT_S", "ToolResult", "DiscoveryBackend", "AmdBackend", "IntelBackend",
    "AppleBackend", "run_tool", "host_system", "apple_default_working_set", "APPLE_BUDGET_RULE", "default_backends",
]

TOOL_TIMEOUT_S = 5.0  # each external command's limit: a hung driver tool must not hang `vramwise gpus`
MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class ToolResult:
    """What one external command gave: ``problem`` is None when it ran and exited 0."""

    stdout: str = ""
    problem: str | None = None


def run_tool(argv: Sequence[str], timeout: float = TOOL_TIMEOUT_S) -> ToolResult:
    """Runs one command (no shell) with a bounded time; never raises."""
    if shutil.which(argv[0]) is None:
        return ToolResult("", f"{argv[0]} not found")
    try:
        cp = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ToolResult("", f"`{' '.join(argv)}` gave no answer within {timeout:g} s")
    except OSError as e:
        return ToolResult("", f"`{' '.join(argv)}` could not run ({type(e).__name__}: {e})")
    if cp.returncode != 0:
        tail = (cp.stderr or cp.stdout).strip().splitlines()
        return ToolResult(cp.stdout, f"`{' '.join(argv)}` exited {cp.returncode}" + (f" ({tail[-1][:200]})" if tail else ""))
    return ToolResult(cp.stdout, None)


def host_system() -> tuple[str, str]:
    """(operating system, machine), as :mod:`platform` names them: ("Darwin", "arm64") on Apple Silicon."""
    return platform.system(), platform.machine()


class DiscoveryBackend(Protocol):
    """One way of finding accelerators."""

    name: str

    def discover(self, env: Mapping[str, str]) -> BackendReport: ...


def _gpu(**kw) -> GpuInfo:
    return GpuInfo(**kw)


def _load_json(text: str, argv: str) -> tuple[Any, str | None]:
    """(parsed JSON, None), or (None, a "could not read" line); tools may print warnings before the JSON."""
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    try:
        if start < 0:
            raise ValueError("no JSON in the output")
        return json.loads(text[start:]), None
    except ValueError as e:
        return None, f"could not read the output of `{argv}` ({str(e).splitlines()[0][:120]})"


# ---- AMD ------------------------------------------------------------------------------------------

def _load_amdsmi():
    import amdsmi  # noqa: F401 - the ROCm library; absent on most machines

    return amdsmi


def _mb(entry: Any) -> int | None:
    """amd-smi's ``{"value": N, "unit": "MB"}`` (or a bare number of MB) in bytes; None for "N/A"."""
    value = entry.get("value") if isinstance(entry, dict) else entry
    unit = entry.get("unit", "MB") if isinstance(entry, dict) else "MB"
    try:
        n = float(value)
    except (TypeError, ValueError):
        return None
    scale = {"B": 1, "KB": 2**10, "MB": MIB, "GB": GIB}.get(str(unit).upper())
    return None if scale is None else int(n * scale)


def _rows(data: Any) -> list[dict]:
    if isinstance(data, dict) and isinstance(data.get("gpu_data"), list):
        data = data["gpu_data"]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise ValueError("expected a list of GPUs")
    return data


def _first_found(backend, probes, env: Mapping[str, str], variable: str, vendor: str) -> BackendReport:
    """The devices of the first of ``probes`` (library, then tools) that finds any, as ``backend`` shows them under
    ``env``; else a report naming what each probe found instead."""
    tried: list[str] = []
    for probe in probes:
        devices, problem = probe()
        if devices:
            return backend._visible(tuple(devices), env)
        tried.append(problem or "no device")
    return BackendReport(backend.name, variable=variable, variable_value=env.get(variable),
                         reason=f"no {vendor} GPU found: " + "; ".join(tried))


def _device_of(backend: str, variable: str, i: int, name: str, uuid: str, total: int, used: int | None) -> Any:
    """A device a backend found (``used`` None: the tool does not say, and then neither is free known)."""
    return _gpu(index=i, uuid=uuid, name=name, total=total, used=used, free=None if used is None else total - used,
                backend=backend, visibility_variable=variable)


class AmdBackend:
    """AMD GPUs through ROCm: the amdsmi library, else amd-smi, else rocm-smi."""

    name = "amd"

    def __init__(self, runner: Callable[..., ToolResult] | None = None, load_amdsmi: Callable[[], Any] | None = None):
        self._run = runner or (lambda argv: run_tool(argv))
        self._load = load_amdsmi or _load_amdsmi

    def discover(self, env: Mapping[str, str]) -> BackendReport:
        return _first_found(self, (self._library, self._amd_smi, self._rocm_smi), env, "ROCR_VISIBLE_DEVICES", "AMD")

    def _device(self, i: int, name: str, uuid: str, total: int, used: int | None) -> Any:
        return _device_of(self.name, "ROCR_VISIBLE_DEVICES", i, name, uuid, total, used)

    def _library(self) -> tuple[list, str | None]:
        try:
            lib = self._load()
        except ImportError:
            return [], "the amdsmi library is not installed"
        try:
            lib.amdsmi_init()
        except Exception as e:  # noqa: BLE001 - AmdSmiLibraryException without a driver
            return [], f"amdsmi could not start ({type(e).__name__}: {e})"
        try:
            out = []
            vram = lib.AmdSmiMemoryType.VRAM
            for i, h in enumerate(lib.amdsmi_get_processor_handles()):
                asic = lib.amdsmi_get_gpu_asic_info(h)
                serial = str(asic.get("asic_serial", "") or "")
                out.append(self._device(i, str(asic.get("market_name") or "AMD GPU"), _rocr_uuid(serial),
                                        int(lib.amdsmi_get_gpu_memory_total(h, vram)),
                                        int(lib.amdsmi_get_gpu_memory_usage(h, vram))))
            return out, None if out else "amdsmi reports no GPU"
        except Exception as e:  # noqa: BLE001
            return [], f"amdsmi failed while listing GPUs ({type(e).__name__}: {e})"
        finally:
            try:
                lib.amdsmi_shut_down()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def _amd_smi(self) -> tuple[list, str | None]:
        metric_argv = ["amd-smi", "metric", "--mem-usage", "--json"]
        got = self._run(metric_argv)
        if got.problem:
            return [], got.problem
        data, problem = _load_json(got.stdout, " ".join(metric_argv))
        if problem:
            return [], problem
        static_argv = ["amd-smi", "static", "--asic", "--json"]
        static = self._run(static_argv)
        names: dict = {}
        if static.problem is None:
            sdata, _ = _load_json(static.stdout, " ".join(static_argv))
            try:
                names = {r.get("gpu"): r.get("asic") or {} for r in _rows(sdata)}
            except ValueError:
                names = {}
        try:
            out = []
            for k, row in enumerate(_rows(data)):
                mem = row.get("mem_usage") or {}
                total = _mb(mem.get("total_vram"))
                if total is None:
                    raise ValueError(f"GPU {row.get('gpu', k)} has no total_vram")
                used = _mb(mem.get("used_vram"))
                gpu = row.get("gpu", k)
                asic = names.get(gpu, {})
                out.append(self._device(int(gpu), str(asic.get("market_name") or "AMD GPU"),
                                        _rocr_uuid(str(asic.get("asic_serial") or "")), total, used))
        except (ValueError, TypeError, AttributeError) as e:
            return [], f"could not read the output of `{' '.join(metric_argv)}` ({e})"
        return out, None if out else "amd-smi reports no GPU"

    def _rocm_smi(self) -> tuple[list, str | None]:
        argv = ["rocm-smi", "--showmeminfo", "vram", "--showproductname", "--json"]
        got = self._run(argv)
        if got.problem:
            return [], got.problem
        data, problem = _load_json(got.stdout, " ".join(argv))
        if problem:
            return [], problem
        try:
            cards = sorted(((int(k[4:]), v) for k, v in data.items() if k.startswith("card")), key=lambda kv: kv[0])
            out = []
            for i, (_, card) in enumerate(cards):
                total = int(card["VRAM Total Memory (B)"])
                used = card.get("VRAM Total Used Memory (B)")
                out.append(self._device(i, str(card.get("Card Series") or card.get("Card SKU") or "AMD GPU"),
                                        "", total, None if used is None else int(used)))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return [], f"could not read the output of `{' '.join(argv)}` ({type(e).__name__}: {e})"
        return out, None if out else "rocm-smi reports no GPU"

    def _visible(self, devices: tuple, env: Mapping[str, str]) -> BackendReport:
        rocr = env.get("ROCR_VISIBLE_DEVICES")
        hip_name = "HIP_VISIBLE_DEVICES" if "HIP_VISIBLE_DEVICES" in env else "CUDA_VISIBLE_DEVICES"
        hip = env.get(hip_name)
        problems = []
        order = [d.index for d in devices]
        if rocr is not None:
            named = parse_visible_list(rocr, len(devices), [d.uuid for d in devices])
            order, problem = [devices[i].index for i in named.indices], named.problem
            if problem:
                problems.append(f"ROCR_VISIBLE_DEVICES={rocr!r}: {problem}")
        rocr_order = tuple(order)  # what HIP_VISIBLE_DEVICES numbers: the devices ROCr leaves, in its order
        if hip is not None:
            named = parse_visible_list(hip, len(order))
            order, problem = [order[i] for i in named.indices], named.problem
            if problem:
                problems.append(f"{hip_name}={hip!r}: {problem}")
        reason = "; ".join(problems) or None
        if not order:
            set_vars = ", ".join(f"{k}={env[k]!r}" for k in ("ROCR_VISIBLE_DEVICES", hip_name) if k in env)
            reason = f"no AMD GPU visible: {set_vars} hides every device" + (f" ({reason})" if reason else "")
        return BackendReport(self.name, devices, tuple(order), "ROCR_VISIBLE_DEVICES", rocr, reason,
                             selector="HIP_VISIBLE_DEVICES", selector_base=rocr_order)


def _rocr_uuid(serial: str) -> str:
    """The ``GPU-<id>`` name ROCR_VISIBLE_DEVICES accepts: the ASIC serial in hex, without ``0x``."""
    s = serial.strip().lower()
    s = s[2:] if s.startswith("0x") else s
    return f"GPU-{s}" if s and s not in ("n/a", "0") else ""


# ---- Intel ----------------------------------------------------------------------------------------

def _loaded_torch_xpu():
    """torch.xpu where torch is already imported; None otherwise (discovery never imports torch)."""
    torch = sys.modules.get("torch")
    return getattr(torch, "xpu", None) if torch is not None else None


class IntelBackend:
    """Intel GPUs: torch.xpu where torch is already loaded, else xpu-smi."""

    name = "intel"

    def __init__(self, runner: Callable[..., ToolResult] | None = None, torch_xpu: Callable[[], Any] | None = None):
        self._run = runner or (lambda argv: run_tool(argv))
        self._xpu = torch_xpu or _loaded_torch_xpu

    def discover(self, env: Mapping[str, str]) -> BackendReport:
        return _first_found(self, (self._torch, self._xpu_smi), env, "ZE_AFFINITY_MASK", "Intel")

    def _device(self, i: int, name: str, uuid: str, total: int, used: int | None) -> Any:
        return _device_of(self.name, "ZE_AFFINITY_MASK", i, name, uuid, total, used)

    def _torch(self) -> tuple[list, str | None]:
        xpu = self._xpu()
        if xpu is None:
            return [], "torch is not loaded (torch.xpu is read only where it is)"
        try:
            if not xpu.is_available():
                return [], "torch.xpu reports no device"
            out = []
            for i in range(xpu.device_count()):
                props = xpu.get_device_properties(i)
                total = int(props.total_memory)
                free_total = xpu.mem_get_info(i) if hasattr(xpu, "mem_get_info") else None
                used = None if free_total is None else total - int(free_total[0])
                out.append(self._device(i, str(props.name), "", total, used))
            return out, None
        except Exception as e:  # noqa: BLE001
            return [], f"torch.xpu failed ({type(e).__name__}: {e})"

    def _xpu_smi(self) -> tuple[list, str | None]:
        argv = ["xpu-smi", "discovery", "-j"]
        got = self._run(argv)
        if got.problem:
            return [], got.problem
        data, problem = _load_json(got.stdout, " ".join(argv))
        if problem:
            return [], problem
        try:
            out = []
            for dev in data["device_list"]:
                i = int(dev["device_id"])
                total = int(dev["memory_physical_size_byte"])
                out.append(self._device(i, str(dev.get("device_name") or "Intel GPU"), str(dev.get("uuid") or ""),
                                        total, self._used(i)))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            return [], f"could not read the output of `{' '.join(argv)}` ({type(e).__name__}: {e})"
        return out, None if out else "xpu-smi reports no GPU"

    def _used(self, i: int) -> int | None:
        got = self._run(["xpu-smi", "stats", "-d", str(i), "-j"])
        if got.problem:
            return None
        data, problem = _load_json(got.stdout, "xpu-smi stats")
        try:
            for m in data.get("device_level", []) if not problem else []:
                if m.get("metrics_type") == "XPUM_STATS_MEMORY_USED":
                    return int(float(m["value"]) * MIB)
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return None

    def _visible(self, devices: tuple, env: Mapping[str, str]) -> BackendReport:
        mask = env.get("ZE_AFFINITY_MASK")
        if mask is None or not mask.strip():
            return BackendReport(self.name, devices, tuple(d.index for d in devices), "ZE_AFFINITY_MASK", mask,
                                 selector="ZE_AFFINITY_MASK")
        named, ignored = [], []
        known = {d.index for d in devices}
        for e in (x.strip() for x in mask.split(",")):
            head = e.split(".", 1)[0]
            if head.isdigit() and int(head) in known and (e.count(".") == 0 or e.split(".", 1)[1].isdigit()):
                if int(head) not in named:
                    named.append(int(head))
            else:
                ignored.append(e)
        reason = f"ZE_AFFINITY_MASK={mask!r}: entries {ignored} name no device and are ignored" if ignored else None
        if not named:
            reason = f"no Intel GPU visible: ZE_AFFINITY_MASK={mask!r} names no device of this machine"
        visible = tuple(sorted(named))
        return BackendReport(self.name, devices, visible, "ZE_AFFINITY_MASK", mask, reason, selector="ZE_AFFINITY_MASK")


# ---- Apple Silicon --------------------------------------------------------------------------------

#: The GPU catalog's unified-memory budget rule for macOS (hardware/gpus.yaml, ``unified_budgets``).
APPLE_BUDGET_RULE = "macos-working-set"


def apple_default_working_set(memsize: int) -> int:
    """The GPU's recommended working set macOS gives by default (``iogpu.wired_limit_mb`` = 0), where
    neither MLX nor a set limit tells: the catalog's rule :data:`APPLE_BUDGET_RULE` (two thirds of memory
    up to 36 GiB, three quarters above), whose sources the catalog cites (machines' reports of Metal's
    ``recommendedMaxWorkingSetSize``). Above 36 GiB the rule is a floor, and MLX's figure, where installed,
    replaces it.
    """
    from vramwise.inputs.gpu_catalog import budget_for_memory

    return budget_for_memory(APPLE_BUDGET_RULE, memsize)


def _load_mlx_device_info():
    import importlib.util

    if importlib.util.find_spec("mlx") is None:
        raise ImportError("mlx")
    import mlx.core as mx

    return mx.metal.device_info()


class AppleBackend:
    """Apple Silicon's GPU: unified memory; the device's budget is its recommended working set."""

    name = "apple"

    def __init__(self, runner: Callable[..., ToolResult] | None = None, system: Callable[[], tuple] | None = None,
                 mlx_device_info: Callable[[], Mapping] | None = None):
        self._run = runner or (lambda argv: run_tool(argv))
        self._system = system or host_system
        self._mlx = mlx_device_info or _load_mlx_device_info

    def discover(self, env: Mapping[str, str]) -> BackendReport:
        os_name, machine = self._system()
        if os_name != "Darwin" or machine not in ("arm64", "aarch64"):
            return BackendReport(self.name, reason=f"no Apple GPU: not macOS on Apple Silicon ({os_name} {machine})")
        got = self._run(["sysctl", "-n", "hw.memsize"])
        if got.problem:
            return BackendReport(self.name, reason=f"no Apple GPU read: {got.problem}")
        try:
            memsize = int(got.stdout.strip())
        except ValueError:
            return BackendReport(self.name, reason=f"no Apple GPU read: could not read the output of "
                                                   f"`sysctl -n hw.memsize` ({got.stdout.strip()[:60]!r})")
        working_set, how = self._working_set(memsize)
        name = self._run(["sysctl", "-n", "machdep.cpu.brand_string"])
        chip = name.stdout.strip() if name.problem is None and name.stdout.strip() else "Apple Silicon"
        dev = _gpu(index=0, uuid="", name=f"{chip} GPU", total=working_set, used=None, free=None, backend=self.name,
                   visibility_variable=None, unified=True, memory_source=how, system_memory=memsize)
        return BackendReport(self.name, (dev,), (0,), None, None, None)

    def _working_set(self, memsize: int) -> tuple[int, str]:
        try:
            info = self._mlx()
            size = int(info["max_recommended_working_set_size"])
            if size > 0:
                return size, "MLX max_recommended_working_set_size"
        except Exception:  # noqa: BLE001 - MLX absent or answering without the key: the sysctl and the rule remain
            pass
        got = self._run(["sysctl", "-n", "iogpu.wired_limit_mb"])
        if got.problem is None:
            try:
                mb = int(got.stdout.strip())
            except ValueError:
                mb = 0
            if mb > 0:
                return mb * MIB, "iogpu.wired_limit_mb"
        return apple_default_working_set(memsize), (f"the OS default share (rule {APPLE_BUDGET_RULE} of "
                                                     "hardware/gpus.yaml: 2/3 of memory up to 36 GiB, 3/4 above)")


def default_backends(runner: Callable[..., ToolResult] | None = None) -> tuple:
    """The backends tried after NVML, in order."""
    return (AmdBackend(runner), IntelBackend(runner), AppleBackend(runner))
