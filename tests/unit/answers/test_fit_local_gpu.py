"""``gpu="local"``: the visible devices of the first backend that has any, whatever its vendor (NVIDIA's first,
then AMD, Intel, Apple and Vulkan, as discovery tries them); the smallest memory a device offers; devices of two
backends never make one answer. Hosts are built from BackendReport values as the backends report them."""

from __future__ import annotations

import pytest

from vramwise.answers.fit import _local_target
from vramwise.errors import SettingsError
from vramwise.gpus.device import BackendReport, GpuInfo
from vramwise.gpus.discovery import GpuDiscovery

GiB = 2**30


def _host(*reports: BackendReport) -> GpuDiscovery:
    nvidia = next((r for r in reports if r.backend == "nvidia"), BackendReport("nvidia", reason="no NVIDIA GPU"))
    return GpuDiscovery(nvidia.devices, nvidia.visible, None, False, nvidia.reason,
                        backends=(nvidia, *(r for r in reports if r.backend != "nvidia")))


def _dev(backend: str, i: int, name: str, total: int, free: int | None, **kw) -> GpuInfo:
    return GpuInfo(i, f"{backend}-{i}", name, total, None if free is None else total - free, free, backend=backend,
                   **kw)


def test_an_amd_host_answers_with_its_visible_devices_smallest_free_memory():
    # two MI300X (192 GiB each); the second has 150 GiB free: the answer is for 2 devices of 150 GiB
    amd = BackendReport("amd", (_dev("amd", 0, "MI300X", 192 * GiB, 180 * GiB), _dev("amd", 1, "MI300X", 192 * GiB,
                                                                                      150 * GiB)), (0, 1))
    target = _local_target(_host(amd), None)
    assert (target.memory_bytes, target.count) == (150 * GiB, 2)
    assert target.name == "local (2 x MI300X)" and target.source.startswith("amd: the smallest free memory")
    # a device the visibility variable hides is not counted: only device 0, 180 GiB free
    hidden = BackendReport("amd", amd.devices, (0,), "ROCR_VISIBLE_DEVICES", "0")
    assert (_local_target(_host(hidden), None).memory_bytes, _local_target(_host(hidden), 4).count) == (180 * GiB, 4)


def test_nvidia_comes_first_and_two_backends_are_never_mixed():
    nvidia = BackendReport("nvidia", (_dev("nvidia", 0, "RTX 4090", 24 * GiB, 20 * GiB),), (0,))
    vulkan = BackendReport("vulkan", (_dev("vulkan", 0, "Radeon 780M", 8 * GiB, 6 * GiB),), (0,))
    target = _local_target(_host(nvidia, vulkan), None)
    assert (target.name, target.memory_bytes, target.count) == ("local (1 x RTX 4090)", 20 * GiB, 1)


def test_a_device_without_a_free_figure_offers_its_total_and_a_unified_one_says_so():
    # Apple: the GPU's working set (here 48 GiB of 64), no figure for what other processes use
    apple = BackendReport("apple", (_dev("apple", 0, "Apple M3 Max", 48 * GiB, None, unified=True,
                                         system_memory=64 * GiB, memory_source="MLX max_recommended_working_set_size"),),
                          (0,))
    target = _local_target(_host(apple), None)
    assert target.memory_bytes == 48 * GiB
    assert target.source.startswith("unified memory: the GPU may use 48.00 GiB of the system's 64.00 GiB (75.0 %)")
    assert "the backend does not tell what is in use" in target.source


def test_a_host_without_a_visible_device_names_what_each_backend_found():
    amd = BackendReport("amd", reason="no AMD GPU found: amd-smi not found")
    with pytest.raises(SettingsError, match=r"--gpu local: no visible GPU \(nvidia: no NVIDIA GPU; amd: no AMD GPU "
                                            r"found: amd-smi not found\)"):
        _local_target(_host(amd), None)
