"""``vramwise gpus``: every device of every discovery backend, with its backend, memory, what other
processes use and the variable that selects it; on a host with none, one line per backend tried.

The fake tools' outputs follow the shapes tests/unit/gpus/test_backends.py cites (amd-smi's
``mem_usage`` in MB = 2**20 bytes, xpu-smi's ``device_list``)."""

from __future__ import annotations

import json

import pytest

import vramwise.gpus.discovery as discovery
from vramwise.gpus.backends import AmdBackend, AppleBackend, IntelBackend, ToolResult, VulkanBackend
from vramwise.surfaces.cli.main import main

GIB, MIB = 2**30, 2**20


class Nvml:
    def __init__(self, gpus=(), fail=None):
        self.gpus, self.fail = list(gpus), fail

    def init(self):
        if self.fail:
            raise self.fail

    def shutdown(self):
        pass

    def device_count(self):
        return len(self.gpus)

    def device(self, i):
        return self.gpus[i]


def tools(outputs):
    def run(argv):
        out = outputs.get(tuple(argv))
        return ToolResult("", f"{argv[0]} not found") if out is None else ToolResult(json.dumps(out), None)
    return run


def no_lib():
    raise ImportError("amdsmi")


AMD = {("amd-smi", "metric", "--mem-usage", "--json"): [
    {"gpu": 0, "mem_usage": {"total_vram": {"value": 65536, "unit": "MB"}, "used_vram": {"value": 2048, "unit": "MB"}}},
    {"gpu": 1, "mem_usage": {"total_vram": {"value": 65536, "unit": "MB"}, "used_vram": {"value": 0, "unit": "MB"}}}],
       ("amd-smi", "static", "--asic", "--json"): [{"gpu": 0, "asic": {"market_name": "AMD Instinct MI210"}},
                                                    {"gpu": 1, "asic": {"market_name": "AMD Instinct MI210"}}]}


def backends(outputs, system=("Linux", "x86_64")):
    run = tools(outputs)
    return (AmdBackend(run, load_amdsmi=no_lib), IntelBackend(run, torch_xpu=lambda: None),
            AppleBackend(run, system=lambda: system, mlx_device_info=no_lib), VulkanBackend(run))


@pytest.fixture
def host(monkeypatch):
    def use(nvml, outputs, env, system=("Linux", "x86_64")):
        real = discovery.discover_gpus
        monkeypatch.setattr(discovery, "discover_gpus",
                            lambda: real(nvml=nvml, env=env, backends=backends(outputs, system)))
    return use


def test_mixed_host_lists_each_device_with_backend_and_variable(host, capsys):
    nv = [("GPU-00000000-aaaa", "NVIDIA H100 80GB HBM3", 80 * GIB, 10 * GIB, 70 * GIB)]
    host(Nvml(nv), AMD, {"HIP_VISIBLE_DEVICES": "1"})
    assert main(["gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["backend", "id", "name", "total", "GiB", "used", "GiB", "free", "GiB", "visible",
                                "selected", "by"]
    # NVIDIA: 80 GiB, 10 used, 70 free; AMD: 65536 MB = 64 GiB, 2048 MB = 2 GiB used on GPU 0;
    # HIP_VISIBLE_DEVICES=1 leaves the second AMD GPU only
    assert lines[1].split() == ["nvidia", "0", "NVIDIA", "H100", "80GB", "HBM3", "80.00", "10.00", "70.00", "yes",
                                "CUDA_VISIBLE_DEVICES=0"]
    assert lines[2].split() == ["amd", "0", "AMD", "Instinct", "MI210", "64.00", "2.00", "62.00", "no",
                                "ROCR_VISIBLE_DEVICES=0"]
    assert lines[3].split() == ["amd", "1", "AMD", "Instinct", "MI210", "64.00", "0.00", "64.00", "yes",
                                "ROCR_VISIBLE_DEVICES=1"]
    assert len(lines) == 4  # backends that found nothing add no line on a host with devices


def test_apple_is_unified_with_no_variable(host, capsys):
    mac = {("sysctl", "-n", "hw.memsize"): 32 * GIB, ("sysctl", "-n", "iogpu.wired_limit_mb"): 0}
    host(Nvml(fail=RuntimeError("no NVML on macOS")), mac, {}, system=("Darwin", "arm64"))
    assert main(["gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # 2/3 of 32 GiB (the OS default share up to 36 GiB) = 21.33 GiB; what other processes use is unknown
    assert lines[1].split() == ["apple", "0", "Apple", "Silicon", "GPU", "(unified)", "21.33", "-", "-", "yes", "-"]
    assert lines[2].startswith("apple 0: total is what its GPU may use, from the OS default share")


def test_no_device_names_every_backend_tried(host, capsys):
    host(Nvml(fail=RuntimeError("NVML Shared Library Not Found")), {}, {})
    assert main(["gpus"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "no NVIDIA GPU visible: NVML could not start (RuntimeError: NVML Shared Library Not Found)",
        "no AMD GPU found: the amdsmi library is not installed; amd-smi not found; rocm-smi not found",
        "no Intel GPU found: torch is not loaded (torch.xpu is read only where it is); xpu-smi not found",
        "no Apple GPU: not macOS on Apple Silicon (Linux x86_64)",
        "no Vulkan GPU found: vulkaninfo not found",
        "no GPU found: a run here uses the CPU",
    ]


def test_json_lists_backends(host, capsys):
    host(Nvml(fail=RuntimeError("x")), AMD, {"ROCR_VISIBLE_DEVICES": "7"})
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    amd = data["backends"][1]
    assert amd["backend"] == "amd" and amd["visible"] == [] and amd["variable_value"] == "7"
    assert amd["devices"][0]["total"] == 64 * GIB and amd["devices"][0]["visibility_variable"] == "ROCR_VISIBLE_DEVICES"
    assert data["gpus"] == [] and data["reason"].startswith("no NVIDIA GPU visible")


@pytest.fixture
def select_host(monkeypatch):
    """``vramwise select`` on a fake host: discovery as ``host`` gives it, through select_gpus' default."""
    def use(nvml, outputs, env):
        import vramwise.answers.selection as selection

        real = discovery.discover_gpus
        monkeypatch.setattr(selection, "discover_gpus", lambda **_: real(nvml=nvml, env=env, backends=backends(outputs)))
    return use


def test_select_on_an_amd_host_prints_hip_visible_devices(select_host, capsys):
    select_host(Nvml(fail=RuntimeError("no NVML")), AMD, {})
    assert main(["select"]) == 0
    out = capsys.readouterr().out.splitlines()
    # no estimate: every visible GPU of the one backend with GPUs; AMD's 65536 MB = 64 GiB, GPU 0 uses 2048 MB
    assert out[:3] == ["no estimate: no MODEL given", "mode: fallback_all", "backend: amd"]
    assert "GPUs: 0, 1" in out and "  GPU 0 AMD Instinct MI210: 62.00 GiB free of 64.00" in out
    assert out[-1] == "HIP_VISIBLE_DEVICES=0,1" and not any(x.startswith("CUDA_VISIBLE_DEVICES") for x in out)
    assert main(["select", "--backend", "amd", "--gpu-ids", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["backend"], data["gpu_ids"], data["visibility_variable"], data["visibility_value"]) == (
        "amd", [1], "HIP_VISIBLE_DEVICES", "1")
    assert data["cuda_visible_devices"] is None


def test_select_backend_without_gpus_is_one_line(select_host, capsys):
    select_host(Nvml(fail=RuntimeError("no NVML")), AMD, {})
    assert main(["select", "--backend", "intel"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vramwise: error: no Intel GPU found") and len(err.splitlines()) == 1



# vulkaninfo's text layout and values as tests/unit/gpus/test_backends.py cites them (Vulkan-Tools#801 for the
# device lines, memtest_vulkan#22 for the integrated GPU's heaps, clvk#537 for llvmpipe); only the lines read
VULKANINFO = """Device Groups:
GPU0:
Device Properties and Extensions:
=================================
GPU0:
VkPhysicalDeviceProperties:
\tvendorID          = 0x8086
\tdeviceType        = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
\tdeviceName        = Intel(R) HD Graphics 530
VkPhysicalDeviceMemoryProperties:
memoryHeaps: count = 3
\tmemoryHeaps[0]:
\t\tsize   = 1879048192 (0x70000000) (1.75 GiB)
\t\tbudget = 1785095808 (0x6a666680) (1.66 GiB)
\t\tusage  = 0 (0x00000000) (0.00 B)
\t\tflags: count = 2
\t\t\tMEMORY_HEAP_DEVICE_LOCAL_BIT
\t\t\tMEMORY_HEAP_MULTI_INSTANCE_BIT
\tmemoryHeaps[1]:
\t\tsize   = 7215251456 (0x1ae100000) (6.72 GiB)
\t\tbudget = 6854488576 (0x1988f3200) (6.38 GiB)
\t\tusage  = 0 (0x00000000) (0.00 B)
\t\tflags:
\t\t\tNone
\tmemoryHeaps[2]:
\t\tsize   = 268435456 (0x10000000) (256.00 MiB)
\t\tbudget = 255013680 (0x0f333330) (243.20 MiB)
\t\tusage  = 0 (0x00000000) (0.00 B)
\t\tflags: count = 2
\t\t\tMEMORY_HEAP_DEVICE_LOCAL_BIT
\t\t\tMEMORY_HEAP_MULTI_INSTANCE_BIT
memoryTypes: count = 16
VkPhysicalDeviceDriverProperties:
\tdriverName         = Intel Corporation
\tdriverInfo         = Intel driver
GPU1:
VkPhysicalDeviceProperties:
\tvendorID          = 0x10005
\tdeviceType        = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName        = llvmpipe (LLVM 11.0.1, 256 bits)
VkPhysicalDeviceMemoryProperties:
memoryHeaps: count = 1
\tmemoryHeaps[0]:
\t\tsize   = 8342503424 (0x1f1400000) (7.77 GiB)
\t\tflags: count = 1
\t\t\tMEMORY_HEAP_DEVICE_LOCAL_BIT
memoryTypes: count = 1
"""


def test_vulkan_host_lists_its_gpu_and_what_it_left_out(monkeypatch, capsys):
    def run(argv):
        return ToolResult(VULKANINFO, None) if tuple(argv) == ("vulkaninfo",) else ToolResult("", f"{argv[0]} not found")

    real = discovery.discover_gpus
    monkeypatch.setattr(discovery, "discover_gpus", lambda: real(nvml=Nvml(fail=RuntimeError("no NVML")), env={}, backends=(
        AmdBackend(run, load_amdsmi=no_lib), IntelBackend(run, torch_xpu=lambda: None),
        AppleBackend(run, system=lambda: ("Linux", "x86_64"), mlx_device_info=no_lib), VulkanBackend(run))))
    assert main(["gpus"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # integrated: every heap, 1879048192 + 7215251456 + 268435456 = 9362735104 B = 8.72 GiB; usage 0;
    # free: budgets 1785095808 + 6854488576 + 255013680 = 8894598064 B = 8.28 GiB
    # the name is cut to the 28-character column, the (unified) mark kept
    assert lines[1].split() == ["vulkan", "0", "Intel(R)", "HD", "Graphi", "(unified)", "8.72", "0.00", "8.28",
                                "yes", "GGML_VK_VISIBLE_DEVICES=0"]
    assert lines[2].startswith("vulkan 0: total is what its GPU may use, from Vulkan's memory heaps")
    assert lines[3] == "vulkaninfo lists 1 (llvmpipe (LLVM 11.0.1, 256 bits)): the software rasteriser (device type CPU), left out"
