"""Unified memory as a budget: fit and select on Apple Silicon and AMD APUs answer against what the GPU may use
(the catalog's rule, or the figure the Mac reports), say so in one line, and a size given stays dedicated memory."""

from __future__ import annotations

from pathlib import Path

from vramwise.answers.fit import fit, gpu_target
from vramwise.answers.selection import select_gpus
from vramwise.gpus.backends import AppleBackend, ToolResult
from vramwise.gpus.discovery import discover_gpus

GIB = 2**30
EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "llama-3.1-8b.json")


def test_a_catalog_mac_is_budgeted_by_its_working_set():
    # M3 Max 128GB: 128 x 2**30 = 137,438,953,472 B of system memory, above 36 GiB, so the macOS default working
    # set is three quarters: 137,438,953,472 x 3 // 4 = 103,079,215,104 B (96 GiB)
    t = gpu_target("M3 Max 128GB")
    assert t.memory_bytes == 103_079_215_104
    assert t.matched.memory_bytes == 137_438_953_472  # the entry keeps the system's total
    assert t.source.startswith("unified memory: the GPU may use 96.00 GiB of the system's 128.00 GiB (75.0 %")


def test_fit_on_a_mac_answers_against_the_budget():
    f = fit(EXAMPLE, gpu="M3 Max 128GB", headroom=0.1)
    # usable = 103,079,215,104 x (1 - 0.1) = 92,771,293,593.6, truncated to 92,771,293,593 B
    assert f.gpu.memory_bytes == 103_079_215_104 and f.usable_bytes == 92_771_293_593
    assert f.verdict.memory_bytes == 103_079_215_104
    assert "unified memory" in f.to_dict()["gpu"]["source"]


def test_strix_halo_is_budgeted_by_its_largest_carve_out():
    # 64 x 2**30 x 3 // 4 = 51,539,607,552 B (48 GiB of 64)
    assert gpu_target("Strix Halo 64GB").memory_bytes == 51_539_607_552


def test_a_size_stays_dedicated_memory():
    t = gpu_target("64GB")
    assert t.memory_bytes == 64 * 10**9 and "unified" not in t.source
    assert fit(EXAMPLE, gpu="64GB", headroom=0).usable_bytes == 64 * 10**9


def test_the_cli_says_it_is_unified_memory_in_one_line(capsys):
    from vramwise.surfaces.cli.main import main

    assert main(["fit", EXAMPLE, "--gpu", "M3 Max 128GB"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the line may be wrapped at the terminal's width
    assert text.count("unified memory: the GPU may use 96.00 GiB of the system's 128.00 GiB (75.0 %") == 1
    assert "rule macos-working-set" in text


class _Tools:
    """sysctl as a 32 GiB Mac answers it (hw.memsize in bytes; iogpu.wired_limit_mb 0: the OS default)."""

    def __call__(self, argv):
        out = {("sysctl", "-n", "hw.memsize"): f"{32 * GIB}\n", ("sysctl", "-n", "iogpu.wired_limit_mb"): "0\n",
               ("sysctl", "-n", "machdep.cpu.brand_string"): "Apple M1 Max\n"}.get(tuple(argv))
        return ToolResult(out, None) if out is not None else ToolResult("", f"{argv[0]} not found")


class _NoNvml:
    def init(self):
        raise RuntimeError("NVML Shared Library Not Found")


class _Estimate:
    def __init__(self, total):
        self.total = total

    def min_per_gpu(self, n):
        return self.total


def _no_mlx():
    raise ImportError("mlx")


def _mac():
    apple = AppleBackend(_Tools(), system=lambda: ("Darwin", "arm64"), mlx_device_info=_no_mlx)
    return discover_gpus(nvml=_NoNvml(), env={}, backends=(apple,))


def test_select_on_a_mac_answers_against_the_working_set():
    # 32 GiB Mac, no MLX, no wired limit: two thirds, 34,359,738,368 x 2 // 3 = 22,906,492,245 B (21.33 GiB)
    sel = select_gpus(_Estimate(20 * GIB), discovery=_mac())
    assert sel.mode == "non_cuda" and sel.usable_bytes == 22_906_492_245 and sel.fits is True
    assert "unified memory: the GPU may use 21.33 GiB of the system's 32.00 GiB (66.7 %)" in sel.reason
    assert "the OS default share" in sel.reason
    assert select_gpus(_Estimate(22 * GIB), discovery=_mac()).fits is False  # 23.6 GB > 22.9 GB


def test_a_serving_estimates_gpu_setting_is_the_budget_too():
    import vramwise

    # Strix Halo 128GB: 128 x 2**30 x 3 // 4 = 103,079,215,104 B is the gpu_memory a server sizes itself from
    e = vramwise.estimate(EXAMPLE, profile="vllm", method="inference", gpu="Strix Halo 128GB")
    assert e.settings.gpu == "ryzen-ai-max-395-128gb" and e.settings.gpu_memory == 103_079_215_104
