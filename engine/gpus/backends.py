"""Discovery backends beside NVML: AMD (ROCm), Intel XPU, Apple Silicon and Vulkan, behind one protocol.

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
- Vulkan: ``vulkaninfo``'s text output (Vulkan SDK, "vulkaninfo" in the LunarG SDK docs; KhronosGroup/Vulkan-Tools,
  vulkaninfo/vulkaninfo.cpp: the "Device Properties and Extensions" section, one ``GPU<n>:`` block per
  device the loader enumerates, in that order). ``vulkaninfo --summary`` names the devices but not their
  memory heaps, so the full output is read: ``deviceType``, ``deviceName``, ``vendorID``, ``driverName`` /
  ``driverInfo``, ``deviceUUID`` and ``VkPhysicalDeviceMemoryProperties``' ``memoryHeaps`` (``size``, with
  ``budget`` / ``usage`` where VK_EXT_memory_budget is present, and ``MEMORY_HEAP_DEVICE_LOCAL_BIT``). The
  memory and the visibility follow llama.cpp's Vulkan backend, which ``GGML_VK_VISIBLE_DEVICES`` is for
  (ggml/src/ggml-vulkan/ggml-vulkan.cpp of ggml-org/llama.cpp at 0c1e5709, release b11312, as llama-cpp-python
  0.3.36 vendors it: ``ggml_vk_instance_init`` from line 5172, and ``ggml_backend_vk_get_device_memory``, lines
  15164-15195; the same code as ggml-org/ggml's src/ggml-vulkan/ggml-vulkan.cpp at d99724f, lines 7350 and
  17881-17911):
  the memory is the sum of the device-local heaps (of every heap for an integrated GPU), free the heaps'
  budget less their usage; ``GGML_VK_VISIBLE_DEVICES`` lists indices (commas or spaces) into every device
  the loader enumerates, the software rasteriser included, reading stops at the first entry that is not a
  number and an index beyond the devices makes llama.cpp refuse to start (lines 5263-5282; ggml's 7441-7457);
  unset, llama.cpp takes every discrete and integrated GPU, one per deviceUUID, else the first device that is
  not a CPU (lines 5283-5400; ggml's 7458-7579). The software rasteriser (llvmpipe, ``PHYSICAL_DEVICE_TYPE_CPU``) is left out; an
  integrated GPU is marked ``unified``.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from vramwise.gpus.device import NVIDIA, BackendReport, GpuInfo, parse_visible_list

__all__ = [
    "TOOL_TIMEOUT_S", "ToolResult", "DiscoveryBackend", "AmdBackend", "IntelBackend",
    "AppleBackend", "VulkanBackend", "VULKAN_VENDORS", "parse_vulkaninfo", "run_tool", "host_system", "apple_default_working_set", "APPLE_BUDGET_RULE", "default_backends",
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


# ---- Vulkan ---------------------------------------------------------------------------------------

#: Vulkan's ``vendorID`` (PCI vendor ids) of the vendors a backend of their own reports.
VULKAN_VENDORS = {0x10DE: NVIDIA, 0x1002: "amd", 0x8086: "intel", 0x106B: "apple"}
_VK_TYPES = {"DISCRETE_GPU": "discrete", "INTEGRATED_GPU": "integrated", "VIRTUAL_GPU": "virtual", "CPU": "cpu",
             "OTHER": "other"}
_VK_FIELD = re.compile(r"^\s*(deviceType|deviceName|driverName|driverInfo|deviceUUID|vendorID)\s*=\s*(.*?)\s*$")
_VK_HEAP = re.compile(r"^\s*memoryHeaps\[(\d+)\]\s*:")
_VK_NUMBER = re.compile(r"^\s*(size|budget|usage)\s*=\s*(0x[0-9a-fA-F]+|\d+)")


def parse_vulkaninfo(text: str) -> list[dict]:
    """The devices of ``vulkaninfo``'s text output, in its order (the order the Vulkan loader enumerates them,
    which ``GGML_VK_VISIBLE_DEVICES`` indexes): per ``GPU<n>:`` block of the "Device Properties and Extensions"
    section, ``index``, the first ``deviceType`` / ``deviceName`` / ``driverName`` / ``driverInfo`` /
    ``deviceUUID`` / ``vendorID`` and ``heaps``: per ``memoryHeaps[i]`` of ``VkPhysicalDeviceMemoryProperties``,
    ``size``, ``budget`` and ``usage`` (None where VK_EXT_memory_budget is absent) and ``device_local``
    (``MEMORY_HEAP_DEVICE_LOCAL_BIT`` among its flags). Raises ValueError when there is no such section."""
    lines = text.splitlines()
    start = next((k for k, line in enumerate(lines) if line.startswith("Device Properties and Extensions")), None)
    if start is None:  # the "GPU<n>:" blocks of the layer and group sections above it are not the devices
        raise ValueError("no 'Device Properties and Extensions' section")
    devices: list[dict] = []
    heap: dict | None = None
    for line in lines[start + 1:]:
        head = re.match(r"^GPU(\d+):\s*$", line)
        if head:
            devices.append({"index": int(head.group(1)), "heaps": [], "heaps_done": False})
            heap = None
            continue
        if not devices:
            continue
        dev = devices[-1]
        field = _VK_FIELD.match(line)
        if field and field.group(1) not in dev:
            dev[field.group(1)] = field.group(2)
        if dev["heaps_done"]:
            continue
        if _VK_HEAP.match(line):
            heap = {"size": None, "budget": None, "usage": None, "device_local": False}
            dev["heaps"].append(heap)
        elif heap is not None and line.strip().startswith("memoryTypes"):
            dev["heaps_done"], heap = True, None  # the heaps end where the memory types begin
        elif heap is not None:
            number = _VK_NUMBER.match(line)
            if number:
                heap[number.group(1)] = int(number.group(2), 0)
            elif "MEMORY_HEAP_DEVICE_LOCAL_BIT" in line:
                heap["device_local"] = True
    for dev in devices:
        del dev["heaps_done"]
    return devices


def _vk_type(value: str | None) -> str:
    text = (value or "").upper()
    return next((kind for key, kind in _VK_TYPES.items() if text.endswith(key)), "other")


def _vk_memory(kind: str, heaps: Sequence[dict]) -> tuple[int, int | None, int | None]:
    """(total, used, free) as llama.cpp's Vulkan backend counts them (ggml_backend_vk_get_device_memory): the
    device-local heaps, every heap for an integrated GPU; free is each heap's budget less its usage where
    VK_EXT_memory_budget gives them (then used is the usage), else unknown."""
    counted = [h for h in heaps if h["size"] and (kind == "integrated" or h["device_local"])]
    total = sum(h["size"] for h in counted)
    if counted and all(h["budget"] is not None and h["usage"] is not None for h in counted):
        return total, sum(h["usage"] for h in counted), sum(max(h["budget"] - h["usage"], 0) for h in counted)
    return total, None, None


class VulkanBackend:
    """GPUs as the Vulkan loader lists them (``vulkaninfo``): what llama.cpp's Vulkan backend runs on.

    The software rasteriser (llvmpipe, device type CPU) is left out. A device another backend also reports is
    left out by :meth:`without_devices_of`, so that a GPU is offered once (see there)."""

    name = "vulkan"
    variable = "GGML_VK_VISIBLE_DEVICES"

    def __init__(self, runner: Callable[..., ToolResult] | None = None):
        self._run = runner or (lambda argv: run_tool(argv))

    def discover(self, env: Mapping[str, str]) -> BackendReport:
        got = self._run(["vulkaninfo"])
        spec = env.get(self.variable)
        if "Device Properties and Extensions" not in got.stdout:  # a failing driver may still print its devices
            why = got.problem or "`vulkaninfo` printed no device section"
            return BackendReport(self.name, variable=self.variable, variable_value=spec,
                                 reason=f"no Vulkan GPU found: {why}")
        try:
            listed = parse_vulkaninfo(got.stdout)
        except ValueError as e:
            return BackendReport(self.name, variable=self.variable, variable_value=spec,
                                 reason=f"no Vulkan GPU found: could not read the output of `vulkaninfo` ({e})")
        devices, left_out = [], []
        for d in listed:
            kind = _vk_type(d.get("deviceType"))
            name = d.get("deviceName") or f"Vulkan device {d['index']}"
            total, used, free = _vk_memory(kind, d["heaps"])
            if kind == "cpu":
                left_out.append(f"{d['index']} ({name}): the software rasteriser (device type CPU)")
                continue
            if not total:
                left_out.append(f"{d['index']} ({name}): no memory heap read")
                continue
            driver = " ".join(x for x in (d.get("driverName"), d.get("driverInfo")) if x) or None
            integrated = kind == "integrated"
            devices.append(_gpu(
                index=d["index"], uuid=d.get("deviceUUID") or "", name=name, total=total, used=used, free=free,
                backend=self.name, visibility_variable=self.variable, unified=integrated,
                memory_source=("Vulkan's memory heaps, all of them as llama.cpp counts an integrated GPU's: it "
                               "shares the system's memory") if integrated else None,
                device_type=kind, driver=driver, vendor_id=_vk_vendor(d.get("vendorID"))))
        note = "vulkaninfo lists " + "; ".join(left_out) + ", left out" if left_out else None
        if not devices:
            return BackendReport(self.name, variable=self.variable, variable_value=spec,
                                 reason="no Vulkan GPU found: " + (note or "vulkaninfo lists no device"))
        return self._visible(tuple(devices), len(listed), spec, note)

    def _visible(self, devices: tuple, listed: int, spec: str | None, note: str | None) -> BackendReport:
        """The devices llama.cpp's Vulkan backend takes (ggml_vk_instance_init): unset, every discrete and
        integrated GPU, one per deviceUUID, else the first device that is not a CPU; set, the indices it lists
        (commas or spaces between them) into every device the loader enumerates, the software rasteriser
        counted: reading stops at the first entry that is not a number, and an index beyond the devices makes
        llama.cpp refuse to start."""
        problems = [note] if note else []
        known = {d.index for d in devices}
        if spec is None:
            order, uuids = [], set()
            for d in devices:
                if d.device_type in ("discrete", "integrated") and not (d.uuid and d.uuid in uuids):
                    order.append(d.index)
                    uuids.add(d.uuid)
            order = order or [devices[0].index]
        else:
            order = []
            for e in spec.replace(",", " ").split():
                if not e.lstrip("-").isdigit():
                    problems.append(f"{self.variable}={spec!r}: llama.cpp stops reading at {e!r}")
                    break
                i = int(e)
                if i < 0 or i >= listed:
                    problems.append(f"{self.variable}={spec!r}: index {e} is beyond the {listed} Vulkan device(s): "
                                    "llama.cpp refuses to start")
                    order = []
                    break
                if i not in known:
                    problems.append(f"{self.variable}={spec!r}: device {i} is left out here")
                elif i not in order:
                    order.append(i)
            if not order:
                problems.insert(0, f"no Vulkan GPU visible: {self.variable}={spec!r} names none of them")
        return BackendReport(self.name, devices, tuple(order), self.variable, spec, "; ".join(problems) or None,
                             selector=self.variable)

    @staticmethod
    def without_devices_of(report: BackendReport, others: Sequence[BackendReport]) -> BackendReport:
        """``report`` without the devices another backend reports, so that each GPU is offered once, by its vendor's
        backend (whose runtime a run uses: CUDA, ROCm, Level Zero, Metal). A Vulkan device is another backend's
        device when its deviceUUID is that device's UUID (NVIDIA's Vulkan driver reports the UUID NVML gives,
        without ``GPU-``), else when its vendorID names that backend's vendor and the names agree: equal, or one
        within the other, once lower-cased and without the driver's parenthesised suffix (RADV's
        "AMD Radeon RX 7900 XTX (RADV NAVI31)") and the (R)/(TM) marks. Each device of another backend stands for
        one Vulkan device at most."""
        if not report.devices:
            return report
        taken: set = set()
        kept, same = [], []
        pool = [(b.backend, d) for b in others for d in b.devices]
        for dev in report.devices:
            match = next((k for k, (_, o) in enumerate(pool) if k not in taken and dev.uuid and o.uuid
                          and _uuid_key(dev.uuid) == _uuid_key(o.uuid)), None)
            if match is None:
                vendor = VULKAN_VENDORS.get(dev.vendor_id)
                match = next((k for k, (b, o) in enumerate(pool) if k not in taken and b == vendor
                              and _names_agree(dev.name, o.name)), None)
            if match is None:
                kept.append(dev)
            else:
                taken.add(match)
                backend, other = pool[match]
                same.append(f"{dev.index} ({dev.name}) is {backend} {other.index}")
        if not same:
            return report
        note = "Vulkan device " + "; ".join(same) + ": offered there, once"
        kept_ids = {d.index for d in kept}
        visible = tuple(i for i in report.visible if i in kept_ids)
        reason = "; ".join(x for x in (report.reason, note) if x)
        if not kept:
            reason = f"no Vulkan GPU of its own: {reason}"
        return dataclasses.replace(report, devices=tuple(kept), visible=visible, reason=reason)


def _vk_vendor(value: str | None) -> int | None:
    try:
        return int(str(value).split()[0], 0)
    except (ValueError, IndexError):
        return None


def _uuid_key(uuid: str) -> str:
    u = uuid.strip().lower()
    return (u[4:] if u.startswith("gpu-") else u).replace("-", "")


def _name_key(name: str) -> str:
    n = re.sub(r"\((r|tm)\)", "", name.lower())
    n = re.sub(r"\s*\([^)]*\)\s*$", "", n)  # the driver's suffix: "(RADV NAVI31)", "(LLVM 15.0.6, 256 bits)"
    return " ".join(n.split())


def _names_agree(a: str, b: str) -> bool:
    x, y = _name_key(a), _name_key(b)
    return bool(x and y) and (x == y or x in y or y in x)


def default_backends(runner: Callable[..., ToolResult] | None = None) -> tuple:
    """The backends tried after NVML, in order; Vulkan's last, as it defers to the others' devices."""
    return (AmdBackend(runner), IntelBackend(runner), AppleBackend(runner), VulkanBackend(runner))
