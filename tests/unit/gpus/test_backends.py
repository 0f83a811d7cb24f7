"""Discovery backends beside NVML (AMD, Intel XPU, Apple Silicon), each against fakes built from the
documented output of its tool or library; no such device exists on the test machines.

Sources of the fakes' shapes:
- amd-smi: ROCm/amdsmi amdsmi_cli/amdsmi_commands.py (commit 0ceca28, 2024-10): ``metric --mem-usage``
  fills ``mem_usage.total_vram`` / ``used_vram`` / ``free_vram`` with ``bytes // (1024*1024)`` and, in
  JSON, ``{"value": N, "unit": "MB"}`` (lines 2027-2095); ``static --asic`` fills ``asic.market_name``
  and ``asic.asic_serial`` (line 377 on); each GPU's object carries ``"gpu": N`` (amdsmi_logger.py 411).
- amdsmi library: the same repository's py-interface/amdsmi_interface.py: ``amdsmi_init``,
  ``amdsmi_get_processor_handles``, ``amdsmi_get_gpu_asic_info`` (a dict with ``market_name``),
  ``amdsmi_get_gpu_memory_total`` / ``amdsmi_get_gpu_memory_usage`` (bytes) with ``AmdSmiMemoryType.VRAM``,
  ``amdsmi_shut_down``.
- rocm-smi ``--showmeminfo vram --showproductname --json``: ``cardN`` objects with
  ``VRAM Total Memory (B)``, ``VRAM Total Used Memory (B)`` and ``Card Series`` as strings.
- ROCm visibility: https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html (ROCR_VISIBLE_DEVICES:
  indices or UUIDs, applied by the ROCm runtime to every application; HIP_VISIBLE_DEVICES: indices, HIP
  only) and https://rocm.docs.amd.com/projects/HIP/en/latest/reference/env_variables.html
  ("HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES").
- xpu-smi: intel/xpumanager doc/smi_user_guide.md: ``discovery -j`` gives ``device_list`` with
  ``device_id``, ``device_name``, ``uuid`` and ``memory_physical_size_byte`` (a string in some builds);
  ``stats -d N -j`` gives ``device_level`` metrics, ``XPUM_STATS_MEMORY_USED`` in MiB.
- MLX: ml-explore/mlx python/mlx/core/metal.pyi: ``device_info()`` returns ``memory_size`` and
  ``max_recommended_working_set_size`` (bytes).
- vulkaninfo: the text output's layout (a "Device Properties and Extensions" section, one ``GPU<n>:`` block
  per device with ``VkPhysicalDeviceProperties``, ``VkPhysicalDeviceMemoryProperties``' ``memoryHeaps``,
  ``VkPhysicalDeviceDriverProperties`` and ``VkPhysicalDeviceIDProperties``) is KhronosGroup/Vulkan-Tools
  vulkaninfo/vulkaninfo.cpp's; the values are from outputs posted in issues: an Intel HD Graphics 530
  (integrated) and an AMD Radeon R9 380 (discrete), with their driver and deviceUUID lines, from
  KhronosGroup/Vulkan-Tools#801 (``vulkaninfo --summary``); an AMD Radeon RX 6600 XT's deviceUUID
  ``00000000-0a00-0000-0000-000000000000`` (AMD proprietary driver) from nix-community/nixGL#153; the heaps of an
  RTX 2080 (8 GiB and 246 MiB device-local heaps with budget and usage, a 5.80 GiB host heap) from
  KhronosGroup/Vulkan-Tools#446; an integrated GPU's three heaps (1.75 GiB and 256 MiB device-local, 6.72 GiB
  host) from GpuZelenograd/memtest_vulkan#22; heaps without budget lines (VK_EXT_memory_budget absent) from
  ggml-org/llama.cpp#5198; llvmpipe's driver lines (``DRIVER_ID_MESA_LLVMPIPE``, ``Mesa 20.3.5 (LLVM 11.0.1)``)
  from kpet/clvk#537. A device's heaps are paired with another post's name where a post gives one of the two.
"""

from __future__ import annotations

import json

import pytest

from vramwise import discover_gpus
from vramwise.gpus.backends import (
    AmdBackend,
    AppleBackend,
    IntelBackend,
    ToolResult,
    VulkanBackend,
    apple_default_working_set,
    parse_vulkaninfo,
    run_tool,
)

MIB, GIB = 2**20, 2**30


class FakeTools:
    """The runner every backend calls: argv tuple -> stdout; a missing argv is a tool not installed."""

    def __init__(self, outputs=None):
        self.outputs = dict(outputs or {})
        self.calls = []

    def __call__(self, argv):
        self.calls.append(tuple(argv))
        out = self.outputs.get(tuple(argv))
        if out is None:
            return ToolResult("", f"{argv[0]} not found")
        if isinstance(out, ToolResult):
            return out
        return ToolResult(out if isinstance(out, str) else json.dumps(out), None)


class NoNvml:
    def init(self):
        raise RuntimeError("NVML Shared Library Not Found")


METRIC = ("amd-smi", "metric", "--mem-usage", "--json")
STATIC = ("amd-smi", "static", "--asic", "--json")
ROCM_SMI = ("rocm-smi", "--showmeminfo", "vram", "--showproductname", "--json")
XPU_DISCOVERY = ("xpu-smi", "discovery", "-j")


def amd_tools(n=3):
    """n MI300X, GPU k using 1024*k MB (amd-smi's MB: bytes // 2**20); 196592 MB is an MI300X's VRAM."""
    metric = [{"gpu": k, "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"},
                                       "used_vram": {"value": 1024 * k, "unit": "MB"},
                                       "free_vram": {"value": 196592 - 1024 * k, "unit": "MB"}}} for k in range(n)]
    static = [{"gpu": k, "asic": {"market_name": "AMD Instinct MI300X", "asic_serial": f"0x{k + 10:016X}"}}
              for k in range(n)]
    return FakeTools({METRIC: metric, STATIC: static})


def no_amdsmi():
    raise ImportError("No module named 'amdsmi'")


def amd(tools, env=None):
    return AmdBackend(tools, load_amdsmi=no_amdsmi).discover(env or {})


# ---- AMD ---------------------------------------------------------------------------------------------

def test_amd_smi_totals_used_and_names():
    r = amd(amd_tools(2))
    assert [d.index for d in r.devices] == [0, 1] and r.visible == (0, 1) and r.reason is None
    d1 = r.devices[1]
    # 196592 MB of amd-smi = 196592 * 2**20 bytes; GPU 1 uses 1024 MB = 1 GiB, so 196592 - 1024 MB are free
    assert d1.total == 196592 * MIB and d1.used == 1024 * MIB and d1.free == (196592 - 1024) * MIB
    assert d1.name == "AMD Instinct MI300X" and d1.backend == "amd"
    assert d1.visibility_variable == "ROCR_VISIBLE_DEVICES" and not d1.unified
    assert d1.uuid == "GPU-000000000000000b"  # asic_serial 0x...0B without 0x, as ROCR_VISIBLE_DEVICES names it


def test_amd_smi_gpu_data_wrapper_and_warning_banner():
    """Newer amd-smi releases wrap the list in {"gpu_data": [...]}; a warning line may come first."""
    tools = amd_tools(1)
    tools.outputs[METRIC] = "WARNING: User is missing the following required groups: render\n" + json.dumps(
        {"gpu_data": [{"gpu": 0, "mem_usage": {"total_vram": {"value": 24560, "unit": "MB"},
                                                 "used_vram": {"value": 0, "unit": "MB"}}}]})
    r = amd(tools)
    assert r.devices[0].total == 24560 * MIB and r.devices[0].used == 0


def test_amdsmi_library_preferred_when_importable():
    class Lib:
        class AmdSmiMemoryType:
            VRAM = 0

        shut = 0

        def amdsmi_init(self):
            pass

        def amdsmi_shut_down(self):
            Lib.shut += 1

        def amdsmi_get_processor_handles(self):
            return ["h0"]

        def amdsmi_get_gpu_asic_info(self, h):
            return {"market_name": "AMD Radeon RX 7900 XTX", "asic_serial": "0xABCD"}

        def amdsmi_get_gpu_memory_total(self, h, kind):
            return 24 * GIB

        def amdsmi_get_gpu_memory_usage(self, h, kind):
            return 3 * GIB

    tools = FakeTools()
    r = AmdBackend(tools, load_amdsmi=Lib).discover({})
    d = r.devices[0]
    assert (d.name, d.total, d.used, d.free) == ("AMD Radeon RX 7900 XTX", 24 * GIB, 3 * GIB, 21 * GIB)
    assert tools.calls == [] and Lib.shut == 1  # no command run; the library shut down


def test_rocm_smi_when_amd_smi_is_absent():
    tools = FakeTools({ROCM_SMI: {"card0": {"VRAM Total Memory (B)": "25753026560", "VRAM Total Used Memory (B)": "1073741824",
                                            "Card Series": "Radeon RX 7900 XTX"},
                                  "card1": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "0",
                                            "Card Series": "AMD Instinct MI210"},
                                  "system": {"Driver version": "6.8"}}})
    r = amd(tools)
    assert [(d.index, d.name, d.total, d.used) for d in r.devices] == [
        (0, "Radeon RX 7900 XTX", 25753026560, 2**30), (1, "AMD Instinct MI210", 68702699520, 0)]
    assert r.devices[0].free == 25753026560 - 2**30


def test_rocr_then_hip_visible_devices():
    """ROCR_VISIBLE_DEVICES picks physical devices (index or UUID); HIP_VISIBLE_DEVICES indexes what is left."""
    # ROCR "2,0" leaves physical [2, 0]; HIP "1" is the second of those: physical 0
    assert amd(amd_tools(), {"ROCR_VISIBLE_DEVICES": "2,0", "HIP_VISIBLE_DEVICES": "1"}).visible == (0,)
    # a UUID entry: GPU 1's serial 0x...0B
    assert amd(amd_tools(), {"ROCR_VISIBLE_DEVICES": "GPU-000000000000000b"}).visible == (1,)
    # HIP reads CUDA_VISIBLE_DEVICES where HIP_VISIBLE_DEVICES is unset
    assert amd(amd_tools(), {"CUDA_VISIBLE_DEVICES": "2"}).visible == (2,)
    assert amd(amd_tools(), {"CUDA_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "0"}).visible == (0,)


def test_amd_invalid_visibility_entry():
    r = amd(amd_tools(), {"HIP_VISIBLE_DEVICES": "1,7,0"})  # 7 names no device: the list ends there
    assert r.visible == (1,) and "HIP_VISIBLE_DEVICES='1,7,0'" in r.reason and "'7'" in r.reason
    r = amd(amd_tools(), {"ROCR_VISIBLE_DEVICES": "9"})
    assert r.visible == () and r.reason.startswith("no AMD GPU visible: ROCR_VISIBLE_DEVICES='9' hides every device")
    assert amd(amd_tools(), {"ROCR_VISIBLE_DEVICES": ""}).visible == ()


def test_amd_garbage_and_missing_tools():
    tools = amd_tools(1)
    tools.outputs[METRIC] = "Segmentation fault\n"
    r = amd(tools)
    assert r.devices == () and "could not read the output of `amd-smi metric --mem-usage --json`" in r.reason
    tools.outputs[METRIC] = {"gpu_data": [{"gpu": 0, "mem_usage": {"total_vram": "N/A"}}]}
    assert "could not read" in amd(tools).reason and "total_vram" in amd(tools).reason
    r = amd(FakeTools())
    assert r.reason == ("no AMD GPU found: the amdsmi library is not installed; amd-smi not found; "
                        "rocm-smi not found")


# ---- Intel -------------------------------------------------------------------------------------------

def intel_tools():
    return FakeTools({
        XPU_DISCOVERY: {"device_list": [
            {"device_id": 0, "device_name": "Intel(R) Data Center GPU Max 1550", "uuid": "00000000-0000-0000-0000-0bd50000",
             "memory_physical_size_byte": "137438953472"},
            {"device_id": 1, "device_name": "Intel(R) Arc(TM) A770 Graphics", "uuid": "00000000-0000-0000-0000-56a00000",
             "memory_physical_size_byte": 17179869184}]},
        ("xpu-smi", "stats", "-d", "0", "-j"): {"device_level": [{"metrics_type": "XPUM_STATS_MEMORY_USED", "value": 2048}]},
    })


def no_torch():
    return None


def intel(tools, env=None):
    return IntelBackend(tools, torch_xpu=no_torch).discover(env or {})


def test_xpu_smi_totals_used_names():
    r = intel(intel_tools())
    d0, d1 = r.devices
    # 137438953472 bytes = 128 GiB; 2048 MiB used = 2 GiB
    assert (d0.name, d0.total, d0.used, d0.free) == ("Intel(R) Data Center GPU Max 1550", 128 * GIB, 2 * GIB, 126 * GIB)
    assert (d1.total, d1.used, d1.free) == (16 * GIB, None, None)  # no stats for device 1: unknown, not 0
    assert d0.backend == "intel" and d0.visibility_variable == "ZE_AFFINITY_MASK" and r.visible == (0, 1)


def test_ze_affinity_mask():
    assert intel(intel_tools(), {"ZE_AFFINITY_MASK": "1"}).visible == (1,)
    assert intel(intel_tools(), {"ZE_AFFINITY_MASK": "0.1,1.0"}).visible == (0, 1)  # sub-devices name their device
    r = intel(intel_tools(), {"ZE_AFFINITY_MASK": "1,5"})
    assert r.visible == (1,) and "['5']" in r.reason
    r = intel(intel_tools(), {"ZE_AFFINITY_MASK": "x"})
    assert r.visible == () and r.reason == "no Intel GPU visible: ZE_AFFINITY_MASK='x' names no device of this machine"


def test_torch_xpu_where_torch_is_loaded():
    class Props:
        name, total_memory = "Intel(R) Arc(TM) B580 Graphics", 12 * GIB

    class Xpu:
        def is_available(self):
            return True

        def device_count(self):
            return 1

        def get_device_properties(self, i):
            return Props()

        def mem_get_info(self, i):
            return (10 * GIB, 12 * GIB)  # (free, total) as torch.cuda.mem_get_info

    tools = FakeTools()
    r = IntelBackend(tools, torch_xpu=Xpu).discover({})
    assert (r.devices[0].total, r.devices[0].used) == (12 * GIB, 2 * GIB) and tools.calls == []


def test_intel_garbage_and_none_found():
    tools = intel_tools()
    tools.outputs[XPU_DISCOVERY] = {"device_list": [{"device_id": 0}]}
    r = intel(tools)
    assert r.devices == () and "could not read the output of `xpu-smi discovery -j` (KeyError" in r.reason
    assert intel(FakeTools()).reason == ("no Intel GPU found: torch is not loaded (torch.xpu is read only where it is); "
                                         "xpu-smi not found")


# ---- Apple -------------------------------------------------------------------------------------------

def mac(memsize=64 * GIB, wired_mb="0"):
    return FakeTools({("sysctl", "-n", "hw.memsize"): f"{memsize}\n", ("sysctl", "-n", "iogpu.wired_limit_mb"): f"{wired_mb}\n",
                      ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M3 Max\n"})


def no_mlx():
    raise ImportError("mlx")


def apple(tools, mlx=no_mlx, system=("Darwin", "arm64")):
    return AppleBackend(tools, system=lambda: system, mlx_device_info=mlx).discover({})


def test_apple_mlx_working_set():
    r = apple(mac(), mlx=lambda: {"memory_size": 64 * GIB, "max_recommended_working_set_size": 51539607552})
    d = r.devices[0]
    assert d.total == 51539607552 and d.unified and d.visibility_variable is None and d.backend == "apple"
    assert d.name == "Apple M3 Max GPU" and d.used is None and r.visible == (0,)


def test_apple_wired_limit_then_default_share():
    assert apple(mac(wired_mb="57344")).devices[0].total == 57344 * MIB  # iogpu.wired_limit_mb in MiB
    # unset (0): the OS default, 3/4 of 64 GiB = 48 GiB; 2/3 of 16 GiB = 10.67 GiB (exo-explore/exo#1672 reports 10.67 GB)
    d = apple(mac()).devices[0]
    assert d.total == 48 * GIB and "default share" in d.memory_source
    assert apple_default_working_set(16 * GIB) == 16 * GIB * 2 // 3
    assert apple_default_working_set(36 * GIB) == 24 * GIB and apple_default_working_set(48 * GIB) == 36 * GIB


def test_apple_elsewhere_and_garbage():
    assert apple(mac(), system=("Linux", "x86_64")).reason == "no Apple GPU: not macOS on Apple Silicon (Linux x86_64)"
    tools = mac()
    tools.outputs[("sysctl", "-n", "hw.memsize")] = "sysctl: unknown oid\n"
    assert apple(tools).reason.startswith("no Apple GPU read: could not read the output of `sysctl -n hw.memsize`")


# ---- all together ------------------------------------------------------------------------------------

def test_no_device_says_what_each_backend_tried():
    tools = FakeTools()
    backends = (AmdBackend(tools, load_amdsmi=no_amdsmi), IntelBackend(tools, torch_xpu=no_torch),
                AppleBackend(tools, system=lambda: ("Linux", "x86_64")))
    d = discover_gpus(nvml=NoNvml(), env={}, backends=backends)
    assert d.devices == () and d.gpus == ()
    assert d.report() == (
        "nvidia: no NVIDIA GPU visible: NVML could not start (RuntimeError: NVML Shared Library Not Found)",
        "amd: no AMD GPU found: the amdsmi library is not installed; amd-smi not found; rocm-smi not found",
        "intel: no Intel GPU found: torch is not loaded (torch.xpu is read only where it is); xpu-smi not found",
        "apple: no Apple GPU: not macOS on Apple Silicon (Linux x86_64)",
    )
    assert [b["backend"] for b in d.to_dict()["backends"]] == ["nvidia", "amd", "intel", "apple"]


def test_amd_host_leaves_nvidia_selection_as_it_was():
    d = discover_gpus(nvml=NoNvml(), env={"HIP_VISIBLE_DEVICES": "1"},
                      backends=(AmdBackend(amd_tools(2), load_amdsmi=no_amdsmi),))
    assert [x.backend for x in d.devices] == ["amd", "amd"] and d.gpus == () and not d.available
    assert d.backends[1].visible == (1,)


def test_run_tool_bounds_and_missing(tmp_path):
    assert run_tool(["vramwise-no-such-tool"]).problem == "vramwise-no-such-tool not found"
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    assert run_tool([str(slow)], timeout=0.2).problem == f"`{slow}` gave no answer within 0.2 s"
    bad = tmp_path / "bad"
    bad.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    bad.chmod(0o755)
    assert run_tool([str(bad)]).problem == f"`{bad}` exited 3 (boom)"


# ---- the visibility-list rule CUDA and ROCm share ----------------------------------------------------

def test_visible_list_shared_rule():
    """Indices and UUIDs; the first entry naming no device (out of range, negative, repeated) ends the list."""
    from vramwise.gpus.device import parse_visible_list

    uuids = ["GPU-aaaa1111", "GPU-bbbb2222", "GPU-aaaa3333"]
    for cuda in (False, True):  # both runtimes' parameters give the same answer here
        kw = {"bare_uuid_prefixes": cuda, "mig_entries": cuda}
        assert parse_visible_list("2,0", 3, uuids, **kw).indices == (2, 0)
        assert parse_visible_list("1,7,0", 3, uuids, **kw).indices == (1,)  # 7 ends the list; 0 is not read
        assert parse_visible_list("0,-1,1", 3, uuids, **kw).indices == (0,)
        assert parse_visible_list("1,1,2", 3, uuids, **kw).indices == (1,)
        assert parse_visible_list("GPU-bbbb2222,0", 3, uuids, **kw).indices == (1, 0)
        assert parse_visible_list("GPU-bbbb", 3, uuids, **kw).indices == (1,)  # a unique prefix after GPU-
        assert parse_visible_list("GPU-aaaa", 3, uuids, **kw).indices == ()  # matches two devices: ends the list
        assert parse_visible_list(" ", 3, uuids, **kw) == parse_visible_list("", 3, uuids, **kw)
        assert parse_visible_list("", 3, uuids, **kw).indices == ()
    r = parse_visible_list("0,9", 3, uuids)
    assert r.problem == "entry '9' names no device: the list ends there" and not r.uses_uuids


def test_visible_list_runtime_differences():
    """CUDA takes a bare UUID prefix (no GPU-) and MIG entries; ROCr takes a bare UUID only whole."""
    from vramwise.gpus.device import parse_visible_list

    uuids = ["GPU-aaaa1111", "GPU-bbbb2222"]
    cuda = {"bare_uuid_prefixes": True, "mig_entries": True}
    assert parse_visible_list("bbbb", 2, uuids, **cuda).indices == (1,)
    assert parse_visible_list("bbbb", 2, uuids).indices == ()  # ROCr: a bare prefix names nothing
    assert parse_visible_list("bbbb2222", 2, uuids).indices == (1,)  # ROCr: the whole UUID without GPU-
    mig = parse_visible_list("MIG-8b1c2d3e-0000", 2, uuids, **cuda)
    assert mig.indices == () and mig.uses_uuids and mig.problem is None
    assert parse_visible_list("MIG-8b1c2d3e-0000", 2, uuids).problem is not None  # ROCr has no MIG entries


# ---- Vulkan ------------------------------------------------------------------------------------------

VULKANINFO = ("vulkaninfo",)

# heaps: (size, budget, usage, device-local), as vulkaninfo prints each memoryHeaps[i]
RTX_2080_HEAPS = [(8589934592, 8005484544, 0, True), (6227162112, 6227162112, 0, False),
                  (257949696, 248905728, 9043968, True)]
IGPU_HEAPS = [(1879048192, 1785095808, 0, True), (7215251456, 6854488576, 0, False),
              (268435456, 255013680, 0, True)]
NO_BUDGET_HEAPS = [(3826401280, None, None, True), (268435456, None, None, True)]


def vk_device(n, kind, name, vendor, driver, info, uuid, heaps):
    lines = [f"GPU{n}:", "VkPhysicalDeviceProperties:", "---------------------------",
             "\tapiVersion        = 1.2.203 (4202699)", "\tdriverVersion     = 101.1340 (419759404)",
             f"\tvendorID          = {vendor}", "\tdeviceID          = 0x1912",
             f"\tdeviceType        = PHYSICAL_DEVICE_TYPE_{kind}", f"\tdeviceName        = {name}",
             "\tpipelineCacheUUID = 2eb7a0b6-0000-0000-0000-000000000000", "",
             "VkPhysicalDeviceMemoryProperties:", "=================================",
             f"memoryHeaps: count = {len(heaps)}"]
    for k, (size, budget, usage, local) in enumerate(heaps):
        lines += [f"\tmemoryHeaps[{k}]:", f"\t\tsize   = {size} ({size:#x}) (x GiB)"]
        if budget is not None:
            lines += [f"\t\tbudget = {budget} ({budget:#x}) (x GiB)", f"\t\tusage  = {usage} ({usage:#010x}) (x B)"]
        lines += ["\t\tflags: count = 1", "\t\t\tMEMORY_HEAP_DEVICE_LOCAL_BIT"] if local else ["\t\tflags:", "\t\t\tNone"]
    lines += ["memoryTypes: count = 2", "\tmemoryTypes[0]:", "\t\theapIndex     = 0",
              "\t\tpropertyFlags = 0x0001: count = 1", "\t\t\tMEMORY_PROPERTY_DEVICE_LOCAL_BIT", "",
              "VkPhysicalDeviceDriverProperties:", "---------------------------------",
              "\tdriverID           = DRIVER_ID_X", f"\tdriverName         = {driver}", f"\tdriverInfo         = {info}",
              "", "VkPhysicalDeviceIDProperties:", "-----------------------------",
              f"\tdeviceUUID      = {uuid}", "\tdriverUUID      = 33302e30-2e31-3031-2e31-333430000000", ""]
    return "\n".join(lines)


INTEL_530 = ("INTEGRATED_GPU", "Intel(R) HD Graphics 530", "0x8086", "Intel Corporation", "Intel driver",
             "86801219-0600-0000-0000-000000000000", IGPU_HEAPS)
R9_380 = ("DISCRETE_GPU", "AMD Radeon (TM) R9 380 Series", "0x1002", "AMD proprietary driver", "21.20.0",
          "00000000-0100-0000-0000-000000000000", RTX_2080_HEAPS)
RX_6600 = ("DISCRETE_GPU", "AMD Radeon RX 6600 XT", "0x1002", "AMD proprietary driver", "2.0.279",
           "00000000-0a00-0000-0000-000000000000", NO_BUDGET_HEAPS)
LLVMPIPE = ("CPU", "llvmpipe (LLVM 11.0.1, 256 bits)", "0x10005", "llvmpipe", "Mesa 20.3.5 (LLVM 11.0.1)",
            "6d657361-3230-2e33-2e35-000000000000", [(8342503424, None, None, True)])


def vulkaninfo(*devices, preamble=True):
    """A vulkaninfo text output: the sections above the devices repeat GPU<n>: headers that are not the devices."""
    head = ["==========", "VULKANINFO", "==========", "", "Vulkan Instance Version: 1.3.250", ""]
    if preamble:
        head += ["Device Groups:", "==============", "Group 0:", "\tProperties:", "GPU0:", "\tdeviceName = decoy", ""]
    body = [vk_device(n, *d) for n, d in enumerate(devices)]
    return "\n".join(head + ["Device Properties and Extensions:", "=================================", *body])


def vulkan(*devices, env=None):
    return VulkanBackend(FakeTools({VULKANINFO: vulkaninfo(*devices)})).discover(env or {})


def test_vulkaninfo_parsed_per_device():
    listed = parse_vulkaninfo(vulkaninfo(INTEL_530, R9_380))
    assert [d["index"] for d in listed] == [0, 1]
    assert listed[0]["deviceName"] == "Intel(R) HD Graphics 530" and listed[1]["vendorID"] == "0x1002"
    assert listed[1]["heaps"][2] == {"size": 257949696, "budget": 248905728, "usage": 9043968, "device_local": True}


def test_vulkan_discrete_and_integrated_memory():
    r = vulkan(INTEL_530, R9_380, LLVMPIPE)
    igpu, dgpu = r.devices
    # discrete, as llama.cpp counts it: the device-local heaps, 8589934592 + 257949696 = 8847884288 B;
    # free = budget - usage per heap: (8005484544 - 0) + (248905728 - 9043968) = 8245346304 B; used 9043968 B
    assert (dgpu.index, dgpu.total, dgpu.free, dgpu.used) == (1, 8847884288, 8245346304, 9043968)
    assert dgpu.device_type == "discrete" and not dgpu.unified and dgpu.driver == "AMD proprietary driver 21.20.0"
    assert dgpu.uuid == "00000000-0100-0000-0000-000000000000" and dgpu.vendor_id == 0x1002
    # integrated: every heap, 1879048192 + 7215251456 + 268435456 = 9362735104 B, shared with the system;
    # free 1785095808 + 6854488576 + 255013680 = 8894598064 B
    assert (igpu.total, igpu.free, igpu.used) == (9362735104, 8894598064, 0)
    assert igpu.unified and igpu.device_type == "integrated" and "shares the system's memory" in igpu.memory_source
    assert igpu.visibility_variable == "GGML_VK_VISIBLE_DEVICES" and igpu.backend == "vulkan"
    # llvmpipe (device type CPU) is left out, and said so; unset, llama.cpp takes discrete and integrated GPUs
    assert "2 (llvmpipe (LLVM 11.0.1, 256 bits)): the software rasteriser (device type CPU)" in r.reason
    assert r.visible == (0, 1) and r.selector == "GGML_VK_VISIBLE_DEVICES"


def test_vulkan_without_memory_budget():
    d = vulkan(RX_6600).devices[0]
    assert d.total == 3826401280 + 268435456 and d.used is None and d.free is None  # no budget: unknown


def test_ggml_vk_visible_devices():
    """Indices into every device the loader lists (llvmpipe counted); commas or spaces between them."""
    assert vulkan(LLVMPIPE, R9_380, INTEL_530, env={"GGML_VK_VISIBLE_DEVICES": "2,1"}).visible == (2, 1)
    assert vulkan(LLVMPIPE, R9_380, INTEL_530, env={"GGML_VK_VISIBLE_DEVICES": "2 1"}).visible == (2, 1)
    r = vulkan(LLVMPIPE, R9_380, env={"GGML_VK_VISIBLE_DEVICES": "0"})
    assert r.visible == () and "device 0 is left out here" in r.reason  # the software rasteriser
    r = vulkan(R9_380, INTEL_530, env={"GGML_VK_VISIBLE_DEVICES": "1,x,0"})
    assert r.visible == (1,) and "stops reading at 'x'" in r.reason
    r = vulkan(R9_380, INTEL_530, env={"GGML_VK_VISIBLE_DEVICES": "0,5"})  # llama.cpp refuses to start
    assert r.visible == () and "index 5 is beyond the 2 Vulkan device(s)" in r.reason
    assert r.reason.startswith("no Vulkan GPU visible")


def test_vulkan_default_falls_back_to_a_virtual_gpu():
    virtual = ("VIRTUAL_GPU", "Virtio-GPU Venus", "0x1af4", "venus", "Mesa 24.0", "", NO_BUDGET_HEAPS)
    assert vulkan(virtual).visible == (0,)  # no discrete or integrated GPU: the first that is not a CPU


def test_vulkan_missing_garbage_and_cpu_only():
    assert VulkanBackend(FakeTools()).discover({}).reason == "no Vulkan GPU found: vulkaninfo not found"
    tools = FakeTools({VULKANINFO: "ERROR: [Loader Message] Code 0 : vkCreateInstance: Found no drivers!\n"})
    assert VulkanBackend(tools).discover({}).reason == "no Vulkan GPU found: `vulkaninfo` printed no device section"
    r = vulkan(LLVMPIPE)
    assert r.devices == () and r.reason.startswith("no Vulkan GPU found: vulkaninfo lists 0 (llvmpipe")
    # a driver that fails after printing its devices: the output is still read
    tools = FakeTools({VULKANINFO: ToolResult(vulkaninfo(R9_380), "`vulkaninfo` exited 1")})
    assert [d.index for d in VulkanBackend(tools).discover({}).devices] == [0]


# ---- one GPU, one backend ------------------------------------------------------------------------------

class OneNvml:
    """NVML with one RTX 2080; its UUID is the deviceUUID NVIDIA's Vulkan driver reports, with GPU- before it."""

    def init(self):
        pass

    def shutdown(self):
        pass

    def device_count(self):
        return 1

    def device(self, i):
        return ("GPU-6cde3e0a-1d2b-4e4f-9a8b-0c1d2e3f4a5b", "NVIDIA GeForce RTX 2080", 8 * GIB, GIB, 7 * GIB)


RTX_2080 = ("DISCRETE_GPU", "NVIDIA GeForce RTX 2080", "0x10de", "NVIDIA", "450.57",
            "6cde3e0a-1d2b-4e4f-9a8b-0c1d2e3f4a5b", RTX_2080_HEAPS)
RADV_6600 = ("DISCRETE_GPU", "AMD Radeon RX 6600 XT (RADV NAVI23)", "0x1002", "radv", "Mesa 23.1",
             "00000000-0a00-0000-0000-000000000000", NO_BUDGET_HEAPS)


def test_a_gpu_seen_by_nvml_and_vulkan_is_listed_once():
    """By UUID (NVIDIA) or by vendor and name (RADV's suffix dropped); Vulkan keeps what no other backend reports."""
    amd_metric = [{"gpu": 0, "mem_usage": {"total_vram": {"value": 8176, "unit": "MB"}, "used_vram": {"value": 0, "unit": "MB"}}}]
    amd_static = [{"gpu": 0, "asic": {"market_name": "AMD Radeon RX 6600 XT"}}]
    tools = FakeTools({VULKANINFO: vulkaninfo(RTX_2080, RADV_6600, INTEL_530), METRIC: amd_metric, STATIC: amd_static})
    d = discover_gpus(nvml=OneNvml(), env={}, backends=(AmdBackend(tools, load_amdsmi=no_amdsmi), VulkanBackend(tools)))
    assert [(x.backend, x.index) for x in d.devices] == [("nvidia", 0), ("amd", 0), ("vulkan", 2)]
    vk = d.backends[2]
    assert vk.visible == (2,)
    assert "0 (NVIDIA GeForce RTX 2080) is nvidia 0" in vk.reason and "1 (AMD Radeon RX 6600 XT (RADV NAVI23)) is amd 0" in vk.reason


def test_no_device_report_names_vulkan_too():
    tools = FakeTools()
    backends = (AmdBackend(tools, load_amdsmi=no_amdsmi), IntelBackend(tools, torch_xpu=no_torch),
                AppleBackend(tools, system=lambda: ("Linux", "x86_64")), VulkanBackend(tools))
    d = discover_gpus(nvml=NoNvml(), env={}, backends=backends)
    assert d.report()[-1] == "vulkan: no Vulkan GPU found: vulkaninfo not found"
    assert len(d.report()) == 5


# ---- select among every backend's devices ---------------------------------------------------------------

class Est:
    """What selection reads from an estimate: total and min_per_gpu(n) = state / n + replicated (bytes)."""

    def __init__(self, total, state, replicated):
        self.total, self._state, self._replicated = total, state, replicated

    def min_per_gpu(self, n):
        return self._state // n + self._replicated


def host(nvml=None, env=None, tools=None, vulkan_tools=None):
    tools = tools or FakeTools()
    backends = (AmdBackend(tools, load_amdsmi=no_amdsmi), IntelBackend(tools, torch_xpu=no_torch),
                AppleBackend(tools, system=lambda: ("Linux", "x86_64")), VulkanBackend(vulkan_tools or tools))
    return discover_gpus(nvml=nvml or NoNvml(), env=env or {}, backends=backends)


def test_select_on_an_amd_host_with_two_mi300x():
    from vramwise import child_env, select_gpus

    # amd_tools(2): 196592 MB each (MB = 2**20 B), GPU 1 uses 1024 MB: free 196592 and 195568 MiB
    # 250 GiB (state 200, replicated 20): one GPU holds 196592 MiB = 191.98 GiB < 250; two give
    # 196592 + 0.85 x 195568 = 362824.8 MiB = 354.32 GiB >= 250, and each holds 200/2 + 20 = 120 GiB <= 190.98
    sel = select_gpus(Est(250 * GIB, 200 * GIB, 20 * GIB), discovery=host(tools=amd_tools(2)))
    assert (sel.backend, sel.mode, sel.gpu_ids, sel.fits) == ("amd", "auto", (0, 1), True)
    assert sel.usable_bytes == int(196592 * MIB + 0.85 * 195568 * MIB)
    assert sel.visibility == ("HIP_VISIBLE_DEVICES", "0,1") and sel.cuda_visible_devices is None
    assert child_env(sel, {"PATH": "/bin"}) == {"PATH": "/bin", "HIP_VISIBLE_DEVICES": "0,1"}
    # 100 GiB (state 80, replicated 10) fits GPU 0 alone, the one with more free memory
    sel = select_gpus(Est(100 * GIB, 80 * GIB, 10 * GIB), discovery=host(tools=amd_tools(2)))
    assert sel.gpu_ids == (0,) and sel.visibility == ("HIP_VISIBLE_DEVICES", "0")
    # under ROCR_VISIBLE_DEVICES=1,0 HIP numbers physical 1 as 0 and physical 0 as 1
    sel = select_gpus(Est(100 * GIB, 80 * GIB, 10 * GIB), discovery=host(env={"ROCR_VISIBLE_DEVICES": "1,0"},
                                                                          tools=amd_tools(2)))
    assert sel.gpu_ids == (0,) and sel.visibility == ("HIP_VISIBLE_DEVICES", "1")


def test_select_on_an_intel_host():
    from vramwise import select_gpus

    # intel_tools(): device 0 has 128 GiB, 2 GiB used (126 free); device 1 16 GiB, use unknown (its total counts)
    est = Est(20 * GIB, 10 * GIB, 10 * GIB)
    sel = select_gpus(est, discovery=host(tools=intel_tools()))
    assert (sel.backend, sel.gpu_ids, sel.fits, sel.usable_bytes) == ("intel", (0,), True, 126 * GIB)
    assert sel.visibility == ("ZE_AFFINITY_MASK", "0")
    # the mask leaves device 1: 16 GiB < 20 GiB, all of them, marked as may not fit
    sel = select_gpus(est, discovery=host(env={"ZE_AFFINITY_MASK": "1"}, tools=intel_tools()))
    assert (sel.mode, sel.gpu_ids, sel.fits, sel.usable_bytes) == ("fallback_all", (1,), False, 16 * GIB)
    sel = select_gpus(None, gpu_ids=[1], discovery=host(tools=intel_tools()))
    assert (sel.mode, sel.gpu_ids, sel.visibility) == ("explicit", (1,), ("ZE_AFFINITY_MASK", "1"))


def test_select_on_a_vulkan_only_host():
    from vramwise import GpuSelectionError, select_gpus

    # llvmpipe enumerated first: it is left out, but GGML_VK_VISIBLE_DEVICES still counts it (index 0)
    tools = FakeTools({VULKANINFO: vulkaninfo(LLVMPIPE, INTEL_530, R9_380)})
    # free: integrated 8894598064 B, discrete 8245346304 B (test_vulkan_discrete_and_integrated_memory);
    # 9 GiB = 9663676416 B (state 7, replicated 2): one GPU holds 8894598064 < 9663676416; two give
    # 8894598064 + 0.85 x 8245346304 = 15903142422 B, and each holds 7/2 + 2 = 5.5 GiB <= 8245346304 B
    sel = select_gpus(Est(9 * GIB, 7 * GIB, 2 * GIB), discovery=host(tools=tools))
    assert (sel.backend, sel.gpu_ids, sel.fits) == ("vulkan", (1, 2), True)
    assert sel.usable_bytes == int(8894598064 + 0.85 * 8245346304)
    assert sel.visibility == ("GGML_VK_VISIBLE_DEVICES", "1,2")
    with pytest.raises(GpuSelectionError, match=r"GPU ids \[0\] name no vulkan GPU of this machine \(ids \[1, 2\]\)"):
        select_gpus(None, gpu_ids=[0], discovery=host(tools=tools))  # llvmpipe is no GPU to choose


def test_select_on_a_mixed_host_keeps_one_backend():
    from vramwise import GpuSelectionError, select_gpus

    class Nvml24(OneNvml):
        def device(self, i):  # an RTX 4090: 24 GiB free
            return ("GPU-11111111-2222-3333-4444-555555555555", "NVIDIA GeForce RTX 4090", 24 * GIB, 0, 24 * GIB)

    disc = host(nvml=Nvml24(), tools=amd_tools(2))
    # 10 GiB fits one GPU of either backend: the fewest GPUs tie, NVIDIA comes first
    sel = select_gpus(Est(10 * GIB, 8 * GIB, 2 * GIB), discovery=disc)
    assert (sel.backend, sel.gpu_ids, sel.cuda_visible_devices) == ("nvidia", (0,), "0")
    assert "amd: 1 GPU(s), 191.98 GiB usable, fits" in sel.reason
    # 100 GiB: the RTX 4090's 24 GiB cannot hold it; one MI300X can (191.98 GiB free)
    sel = select_gpus(Est(100 * GIB, 80 * GIB, 10 * GIB), discovery=disc)
    assert (sel.backend, sel.gpu_ids, sel.visibility) == ("amd", (0,), ("HIP_VISIBLE_DEVICES", "0"))
    assert "nvidia: 1 GPU(s), 24.00 GiB usable, does not fit" in sel.reason
    # 500 GiB: no backend holds it; AMD's two give the most usable memory, and no NVIDIA GPU joins them
    sel = select_gpus(Est(500 * GIB, 400 * GIB, 50 * GIB), discovery=disc)
    assert (sel.backend, sel.gpu_ids, sel.fits) == ("amd", (0, 1), False)
    assert all(g.backend == "amd" for g in sel.gpus)
    # explicit ids are NVIDIA's where NVML found GPUs, unless the backend is named
    assert select_gpus(None, gpu_ids=[0], discovery=disc).backend == "nvidia"
    sel = select_gpus(None, gpu_ids=[1], backend="amd", discovery=disc)
    assert (sel.backend, sel.gpu_ids, sel.visibility) == ("amd", (1,), ("HIP_VISIBLE_DEVICES", "1"))
    with pytest.raises(GpuSelectionError, match="no backend 'rocm'"):
        select_gpus(None, backend="rocm", discovery=disc)


def test_select_with_ids_on_two_other_backends_asks_which():
    from vramwise import GpuSelectionError, select_gpus

    tools = amd_tools(1)
    tools.outputs.update(intel_tools().outputs)
    with pytest.raises(GpuSelectionError, match=r"GPU ids \[0\] are ambiguous: GPUs of amd, intel are visible"):
        select_gpus(None, gpu_ids=[0], discovery=host(tools=tools))


def test_select_on_a_host_without_gpus_names_every_backend_tried():
    from vramwise import select_gpus

    sel = select_gpus(None, discovery=host())
    assert (sel.mode, sel.backend, sel.visibility, sel.device_map) == ("non_cuda", "cpu", None, "cpu")
    assert sel.reason.startswith("nvidia: no NVIDIA GPU visible")
    assert sel.reason.endswith("vulkan: no Vulkan GPU found: vulkaninfo not found")


def test_moltenvk_on_a_mac_is_the_apple_gpu():
    """MoltenVK names the Apple GPU as the chip ("Apple M3 Max"); the Apple backend adds " GPU": one within the other."""
    moltenvk = ("INTEGRATED_GPU", "Apple M3 Max", "0x106b", "MoltenVK", "1.2.9", "0000106b-0f00-0000-0000-000000000000",
                [(51539607552, None, None, True)])
    tools = mac()
    tools.outputs[VULKANINFO] = vulkaninfo(moltenvk)
    apple_backend = AppleBackend(tools, system=lambda: ("Darwin", "arm64"), mlx_device_info=no_mlx)
    d = discover_gpus(nvml=NoNvml(), env={}, backends=(apple_backend, VulkanBackend(tools)))
    assert [(x.backend, x.name) for x in d.devices] == [("apple", "Apple M3 Max GPU")]
    assert d.backends[2].reason == ("no Vulkan GPU of its own: Vulkan device 0 (Apple M3 Max) is apple 0: "
                                    "offered there, once")


def test_select_backend_apple_judges_the_working_set():
    from vramwise import select_gpus

    apple_backend = AppleBackend(mac(), system=lambda: ("Darwin", "arm64"), mlx_device_info=no_mlx)
    d = discover_gpus(nvml=NoNvml(), env={}, backends=(apple_backend,))
    # 64 GiB Mac, no MLX, no wired limit: three quarters, 48 GiB (test_apple_wired_limit_then_default_share)
    sel = select_gpus(Est(40 * GIB, 30 * GIB, 10 * GIB), backend="apple", discovery=d)
    assert (sel.mode, sel.backend, sel.usable_bytes, sel.fits, sel.visibility) == ("non_cuda", "apple", 48 * GIB, True, None)
