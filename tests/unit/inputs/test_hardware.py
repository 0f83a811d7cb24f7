"""The GPU catalog (hardware/gpus.yaml) and vramwise.gpu_spec / list_gpus."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml
from jsonschema import Draft202012Validator

import vramwise
from vramwise import FileFormatError, SettingsError
from vramwise.inputs.gpu_catalog import CATALOG_PATH, build_catalog, normalize


def _text() -> str:
    return resources.files("vramwise.hardware").joinpath("gpus.yaml").read_text(encoding="utf-8")


def _schema() -> dict:
    return json.loads(resources.files("vramwise.schemas").joinpath("hardware-1.schema.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the file and its schema


def test_schema_is_valid_2020_12_with_id():
    schema = _schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("hardware-1.schema.json")


def _walk_objects(node, path="$"):
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            yield path, node
        for k, v in node.items():
            yield from _walk_objects(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk_objects(v, f"{path}[{i}]")


def test_schema_closes_every_object_and_describes_every_property():
    for path, obj in _walk_objects(_schema()):
        assert obj.get("additionalProperties") is False, path
        for name, prop in obj.get("properties", {}).items():
            assert prop.get("description"), f"{path}.properties.{name}"


def test_catalog_validates_against_its_schema():
    data = yaml.safe_load(_text())
    assert data["schema_version"] == 1
    errors = list(Draft202012Validator(_schema()).iter_errors(data))
    assert not errors, [e.message for e in errors]
    build_catalog(_text(), validate=True)  # also the semantic checks (ids, aliases, ambiguity)


def test_every_entry_has_positive_memory_a_source_and_unique_names():
    gpus = vramwise.list_gpus()
    assert len(gpus) >= 100
    ids = [g.id for g in gpus]
    assert len(ids) == len(set(ids))
    owner: dict[str, str] = {}
    for g in gpus:
        assert isinstance(g.memory_bytes, int) and g.memory_bytes > 0, g.id
        assert g.source.strip(), g.id
        assert g.vendor in ("nvidia", "amd", "intel", "apple")
        assert g.nvml_visible == (g.vendor == "nvidia"), g.id
        for name in (g.id, g.name, *g.aliases):
            key = normalize(name)
            assert owner.setdefault(key, g.id) == g.id, f"{name!r} names {owner[key]} and {g.id}"


def test_nvidia_readings_are_whole_mib_and_spec_sheet_figures_say_so():
    for g in vramwise.list_gpus():
        if g.memory_reading == "nvidia-smi":
            assert g.memory_bytes % 2**20 == 0, g.id  # nvidia-smi prints whole MiB
        if g.memory_reading == "spec-sheet":
            assert "spec sheet" in g.source, g.id
        assert g.memory_reading in ("nvidia-smi", "rocm-smi", "hip-runtime", "spec-sheet")
        if g.memory_reading == "nvidia-smi":
            assert g.vendor == "nvidia", g.id
        if g.memory_reading in ("rocm-smi", "hip-runtime"):
            assert g.vendor == "amd", g.id


def test_spec_sheet_figures_are_the_whole_gib_their_source_states():
    # a vendor's "16 GB" of GDDR/HBM is 16 GiB of chips: the source writes "(16 x 2**30 bytes"
    import re

    spec_sheet = [g for g in vramwise.list_gpus() if g.memory_reading == "spec-sheet"]
    assert len(spec_sheet) >= 10
    for g in spec_sheet:
        m = re.search(r"\((\d+) x 2\*\*30 bytes", g.source)
        assert m, g.id
        assert g.memory_bytes == int(m.group(1)) * 2**30, g.id
        assert f"{m.group(1)}GB" in g.name.replace(" ", ""), g.id  # the size in the name is the one converted


# Independent figures, as printed by nvidia-smi (MiB) or rocm-smi (bytes) in public reports:
#   A100 80GB 81920MiB, H100 81559MiB (= 85,520,809,984 bytes), A100 40GB 40960MiB, A10 23028MiB,
#   L40S 46068MiB, L4 23034MiB, T4 15360MiB:   https://github.com/modal-labs/modal-client/pull/2797
#   H100 80GB HBM3 81559MiB:                    https://github.com/NVIDIA/nccl/issues/1264
#   H100 NVL 95830MiB:                          https://github.com/NVIDIA/gpu-admin-tools/issues/4
#   B200 183359MiB:                             https://github.com/NVIDIA/TensorRT-LLM/issues/10278
#   RTX 4090 24564MiB:                          https://github.com/RLinf/RLinf/issues/255
#   RTX 3090 24576MiB:                          https://github.com/noonghunna/club-3090/issues/1128
#   RTX 5090 32607MiB:                          https://github.com/noonghunna/club-3090/issues/617
#   MI300X rocminfo "Size: 201310208(0xbffc000) KB" = 201310208 x 1024 = 206141652992 B:
#                                               https://github.com/ROCm/rocm-examples/issues/187
#     and KFD "size_in_bytes 25767706624" per CPX partition, x 8 partitions = 206141652992 B:
#                                               https://github.com/ROCm/legacy-rocm-build/issues/4750
#   RTX 3060 12288MiB (driver 580.95.05):       https://github.com/geerlingguy/raspberry-pi-pcie-devices/issues/790
#   RTX 5070 12227MiB (driver 575.64.03):       https://github.com/shkhln/libc6-shim/issues/14
#   RX 7900 XT 21458059264 B (rocm-smi CSV):    https://github.com/marimo-team/marimo/issues/9237
#   RX 6800 XT / 6900 XT 17163091968 B:         https://github.com/mudler/LocalAI/pull/7761
#   RX 7900 XTX "VRAM Size: 24560 MiB" (LACT, amdgpu's figure) = 24560 x 2**20 = 25753026560 B:
#                                               https://github.com/ilya-zlobintsev/LACT/pull/533
MIB = 2**20
KNOWN = {
    "a100-sxm-80gb": 81920 * MIB,
    "a100-sxm-40gb": 40960 * MIB,
    "h100-sxm": 85_520_809_984,
    "h100-pcie": 81559 * MIB,
    "h100-nvl": 95830 * MIB,
    "b200": 183359 * MIB,
    "a10": 23028 * MIB,
    "l40s": 46068 * MIB,
    "l4": 23034 * MIB,
    "t4": 15360 * MIB,
    "rtx-4090": 24564 * MIB,
    "rtx-3090": 24576 * MIB,
    "rtx-5090": 32607 * MIB,
    "mi300x": 206_141_652_992,
    "rtx-3060-12gb": 12288 * MIB,
    "rtx-5070": 12227 * MIB,
    "rx-7900-xt": 21_458_059_264,
    "rx-6800-xt": 17_163_091_968,
    "rx-6900-xt": 17_163_091_968,
    "rx-7900-xtx": 24560 * MIB,
}


@pytest.mark.parametrize("gpu_id,expected", sorted(KNOWN.items()))
def test_well_known_cards_match_independent_figures(gpu_id, expected):
    assert vramwise.gpu_spec(gpu_id).memory_bytes == expected
    assert expected != 0


# The GPUs the catalog is meant to cover (NVIDIA consumer, workstation and data-center; AMD Instinct
# and Radeon; Intel Arc and Data Center GPU Max), by id.
COVERED = {
    "rtx-2060", "rtx-2070", "rtx-2080", "rtx-2080-ti", "rtx-3060-12gb", "rtx-3060-8gb", "rtx-3060-ti",
    "rtx-3070", "rtx-3070-ti", "rtx-3080-10gb", "rtx-3080-12gb", "rtx-3080-ti", "rtx-3090", "rtx-3090-ti",
    "rtx-4060", "rtx-4060-ti-8gb", "rtx-4060-ti-16gb", "rtx-4070", "rtx-4070-super", "rtx-4070-ti",
    "rtx-4070-ti-super", "rtx-4080", "rtx-4080-super", "rtx-4090", "rtx-5060-ti-8gb", "rtx-5060-ti-16gb",
    "rtx-5070", "rtx-5070-ti", "rtx-5080", "rtx-5090",
    "rtx-a4000", "rtx-a4500", "rtx-a5000", "rtx-a6000", "rtx-2000-ada", "rtx-4000-ada", "rtx-4500-ada",
    "rtx-5000-ada", "rtx-6000-ada", "rtx-pro-6000-blackwell",
    "t4", "v100-16gb", "a10", "a10g", "a30", "a40", "a100-sxm-40gb", "a100-sxm-80gb", "l4", "l20", "l40",
    "l40s", "h20", "h100-pcie", "h100-sxm", "h100-nvl", "h800", "h200-sxm", "gh200", "b200", "gb200", "b300",
    "rtx-pro-6000-server",
    "mi100", "mi210", "mi250", "mi250x", "mi300a", "mi300x", "mi325x", "mi355x",
    "rx-7900-xtx", "rx-7900-xt", "rx-7900-gre", "rx-9070-xt", "rx-9070", "radeon-pro-w7900", "radeon-pro-w7800",
    "arc-a770-16gb", "arc-a750", "arc-b580", "arc-b570", "max-1100", "max-1550",
}


def test_the_catalog_covers_the_gpus_people_train_and_serve_on():
    ids = {g.id for g in vramwise.list_gpus()}
    assert COVERED - ids == set()


def test_display_names_fit_the_web_pages_gpu_menu():
    # the menu shows "NAME (xx.xx GiB)" in a fixed width: names of 44 characters and more were cut off there
    # (tests/external/test_serve_page_person.py::test_catalog_entries_and_menus_are_not_cut_off); 39 fit
    long = [g.name for g in vramwise.list_gpus() if len(g.name) > 40]
    assert long == []


def test_a100_80gb_is_exactly_80_gib():
    assert vramwise.gpu_spec("a100-80gb").memory_bytes == 85_899_345_920 == 80 * 2**30


# ---------------------------------------------------------------- lookups


@pytest.mark.parametrize("query", ["RTX 4090", "rtx-4090", "rtx_4090", "4090", "rtx4090", "NVIDIA GeForce RTX 4090", "  Rtx 4090 "])
def test_name_lookup_forgives_case_and_separators(query):
    g = vramwise.gpu_spec(query)
    assert g.id == "rtx-4090" and g.query == query
    assert g.matched_by in ("id", "name", "alias")


@pytest.mark.parametrize("query,gpu_id", [
    ("H100 SXM5", "h100-sxm"), ("h100-pcie", "h100-pcie"), ("H100 NVL", "h100-nvl"),
    ("a100-sxm4-80gb", "a100-sxm-80gb"), ("A100 80GB PCIe", "a100-pcie-80gb"), ("tesla t4", "t4"),
    ("A10G", "a10g"), ("l40s", "l40s"), ("RTX A6000", "rtx-a6000"), ("6000 Ada", "rtx-6000-ada"),
    ("GH200 480GB", "gh200"), ("MI300X", "mi300x"), ("AMD Instinct MI250X", "mi250x"),
    # names as people type them, and as nvidia-smi / rocm-smi print them
    ("4090", "rtx-4090"), ("RTX 4090", "rtx-4090"), ("H20", "h20"), ("L40S", "l40s"), ("B200", "b200"),
    ("RX 7900 XTX", "rx-7900-xtx"), ("7900 XTX", "rx-7900-xtx"), ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"),
    ("RX 7900 XT", "rx-7900-xt"), ("A770", "arc-a770-16gb"), ("Intel Arc A770", "arc-a770-16gb"),
    ("a6000", "rtx-a6000"), ("4070 Ti Super", "rtx-4070-ti-super"), ("NVIDIA GeForce RTX 5080", "rtx-5080"),
    ("RTX 4060 Ti 16GB", "rtx-4060-ti-16gb"), ("3060 Ti", "rtx-3060-ti"), ("A4000", "rtx-a4000"),
    ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada"), ("NVIDIA H800", "h800"), ("L20", "l20"),
    ("GB200", "gb200"), ("B300", "b300"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
    ("MI210", "mi210"), ("MI355X", "mi355x"), ("MI300A", "mi300a"), ("W7900", "radeon-pro-w7900"),
    ("RX 9070 XT", "rx-9070-xt"), ("B580", "arc-b580"), ("Intel Data Center GPU Max 1550", "max-1550"),
    ("4090 laptop", "rtx-4090-laptop"),
])
def test_aliases(query, gpu_id):
    assert vramwise.gpu_spec(query).id == gpu_id


@pytest.mark.parametrize("query,default,others", [
    ("H100", "h100-sxm", {"h100-pcie", "h100-nvl"}),
    ("A100", "a100-sxm-80gb", {"a100-pcie-80gb", "a100-sxm-40gb", "a100-pcie-40gb"}),
    ("a100 40gb", "a100-sxm-40gb", {"a100-pcie-40gb"}),
    ("A100-40GB", "a100-sxm-40gb", {"a100-pcie-40gb"}),
    ("a100-80gb", "a100-sxm-80gb", {"a100-pcie-80gb"}),
    ("H200", "h200-sxm", {"h200-nvl"}),
    ("V100", "v100-16gb", {"v100-32gb"}),
    ("3060", "rtx-3060-12gb", {"rtx-3060-8gb"}),
    ("RTX 3060", "rtx-3060-12gb", {"rtx-3060-8gb"}),
    ("NVIDIA GeForce RTX 3060", "rtx-3060-12gb", {"rtx-3060-8gb"}),  # the name nvidia-smi prints for both boards
    ("RTX 3080", "rtx-3080-10gb", {"rtx-3080-12gb"}),
    ("4060 Ti", "rtx-4060-ti-8gb", {"rtx-4060-ti-16gb"}),
    ("RTX 5060 Ti", "rtx-5060-ti-8gb", {"rtx-5060-ti-16gb"}),
    ("RTX PRO 6000", "rtx-pro-6000-blackwell", {"rtx-pro-6000-server"}),
])
def test_ambiguous_names_resolve_to_the_documented_default(query, default, others):
    g = vramwise.gpu_spec(query)
    assert g.matched_by == "ambiguous"
    assert g.id == default
    assert set(g.alternatives) == others
    assert default in g.note and all(o in g.note for o in others)


@pytest.mark.parametrize("query,total,unit", [
    ("24GiB", 24 * 2**30, "GiB"), ("24 GiB", 24 * 2**30, "GiB"), ("24gib", 24 * 2**30, "GiB"),
    ("80GB", 80 * 10**9, "GB"), ("80 GB", 80 * 10**9, "GB"), ("16384MiB", 16 * 2**30, "MiB"),
    ("0.5TB", 5 * 10**11, "TB"), ("1.5 GiB", 3 * 2**29, "GiB"),
])
def test_sizes(query, total, unit):
    g = vramwise.gpu_spec(query)
    assert g.matched_by == "size"
    assert g.memory_bytes == total
    assert g.size_unit == unit
    assert unit in g.source and not g.nvml_visible


@pytest.mark.parametrize("query", ["24g", "24G", "24", "80 g", "16m", "2t"])
def test_sizes_without_a_clear_unit_are_rejected(query):
    with pytest.raises(SettingsError, match="ambiguous"):
        vramwise.gpu_spec(query)


# ---------------------------------------------------------------- the one size parser


@pytest.mark.parametrize("text,total,unit", [
    ("16GB", 16 * 10**9, "GB"), ("15 GiB", 15 * 2**30, "GiB"), ("0.5TB", 5 * 10**11, "TB"),
    ("1024KiB", 2**20, "KiB"), (".5 MiB", 2**19, "MiB"), ("2 b", 2, "B"), ("3kb", 3000, "KB"),
    ("1.6e10", 16 * 10**9, None), ("16000000000", 16 * 10**9, None),  # a bare number counts bytes
    ("1.5", 2, None), ("0.4", 0, None),  # to the nearest whole byte
])
def test_size_parser(text, total, unit):
    from vramwise.inputs.sizes import parse_size

    size = parse_size(text)
    assert (size.bytes, size.unit) == (total, unit)


@pytest.mark.parametrize("text", ["16G", "24g", "8 Gb s", "GB", "-1", "nan", "", "1,000", "16 gigabytes"])
def test_size_parser_refuses_what_is_not_a_size(text):
    from vramwise.inputs.sizes import parse_size

    assert parse_size(text) is None


def test_size_parser_refuses_a_size_too_large_for_a_float():
    from vramwise.inputs.sizes import parse_size

    with pytest.raises(SettingsError, match="too large"):
        parse_size("1e400")


def test_gpu_sizes_and_weight_sizes_are_read_alike(capsys):
    from vramwise.surfaces.cli.main import main

    for text, total in (("16GB", 16 * 10**9), ("15GiB", 15 * 2**30), ("1024 MiB", 2**30)):
        assert vramwise.gpu_spec(text).memory_bytes == total  # a GPU of that size
        assert main(["estimate", "--weight-bytes", text, "--json"]) == 0  # a model of those weights
        assert json.loads(capsys.readouterr().out)["total"] == vramwise.estimate_from_size(weight_bytes=total).total
    # a bare number: bytes for --weight-bytes, ambiguous for a GPU (24 GB or 24 GiB?)
    assert main(["estimate", "--weight-bytes", "16000000000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == vramwise.estimate_from_size(weight_bytes=16 * 10**9).total
    with pytest.raises(SettingsError, match="ambiguous"):
        vramwise.gpu_spec("24")


def test_unknown_name_lists_close_matches():
    with pytest.raises(SettingsError) as err:
        vramwise.gpu_spec("rtx 4099")
    assert "unknown GPU 'rtx 4099'" in str(err.value)
    assert "rtx-4090" in str(err.value)


@pytest.mark.parametrize("query", ["", "   ", None, 24])
def test_empty_or_non_string_queries_are_rejected(query):
    with pytest.raises(SettingsError):
        vramwise.gpu_spec(query)


def test_specs_are_frozen():
    g = vramwise.gpu_spec("t4")
    with pytest.raises(AttributeError):
        g.memory_bytes = 1  # type: ignore[misc]


def test_lazy_exports():
    assert {"gpu_spec", "list_gpus", "GpuSpec"} <= set(vramwise.__all__)
    assert isinstance(vramwise.gpu_spec("l4"), vramwise.GpuSpec)


# ---------------------------------------------------------------- broken catalogs


_MINIMAL = """\
schema_version: 1
gpus:
  - id: one
    name: One
    vendor: nvidia
    memory_bytes: 1024
    memory_reading: nvidia-smi
    source: test
    aliases: [shared]
    nvml_visible: true
  - id: two
    name: Two
    vendor: nvidia
    memory_bytes: 2048
    memory_reading: nvidia-smi
    source: test
    aliases: [Shared]
    nvml_visible: true
"""


def test_an_alias_naming_two_gpus_is_rejected_with_its_position():
    with pytest.raises(FileFormatError) as err:
        build_catalog(_MINIMAL, "gpus.yaml")
    assert "gpus.yaml:17:15: $.gpus[1].aliases[0]: 'Shared' also names GPU 'one'" in str(err.value)


def test_schema_errors_carry_positions():
    text = _MINIMAL.replace("memory_bytes: 2048", "memory_bytes: -1").replace("[Shared]", "[other]")
    with pytest.raises(FileFormatError, match=r"gpus.yaml:14:19: \$.gpus\[1\].memory_bytes"):
        build_catalog(text, "gpus.yaml")


def test_unknown_ambiguous_candidate_is_rejected():
    text = _MINIMAL.replace("[Shared]", "[other]") + (
        "ambiguous:\n  - name: o\n    default: one\n    candidates: [one, three]\n    reason: r\n"
    )
    with pytest.raises(FileFormatError, match="unknown GPU id 'three'"):
        build_catalog(text, "gpus.yaml")


def test_catalog_path_is_the_repository_file():
    assert CATALOG_PATH == "hardware/gpus.yaml"


# ---------------------------------------------------------------- unified memory (Apple Silicon, AMD APUs)

from vramwise.inputs.gpu_catalog import budget_for_memory, unified_budget  # noqa: E402

# The memory sizes Apple's tech-spec pages list for each chip (MacBook Air (M1, 2020); MacBook Pro (14-inch,
# 2021); Mac Studio (2022); MacBook Air (M2, 2022); MacBook Pro (14-inch, 2023); Mac Studio (2023); MacBook Pro
# (14-inch, M3, Nov 2023); MacBook Pro (14-inch, M3 Pro or M3 Max, Nov 2023); Mac Studio (2025); MacBook Pro
# (14-inch, M4, 2024); Mac mini (2024); MacBook Pro (14-inch, M4 Pro or M4 Max, 2024)), in GB
APPLE_SIZES = {
    "m1": [8, 16], "m1-pro": [16, 32], "m1-max": [32, 64], "m1-ultra": [64, 128],
    "m2": [8, 16, 24], "m2-pro": [16, 32], "m2-max": [32, 64, 96], "m2-ultra": [64, 128, 192],
    "m3": [8, 16, 24], "m3-pro": [18, 36], "m3-max": [36, 48, 64, 96, 128], "m3-ultra": [96, 256, 512],
    "m4": [16, 24, 32], "m4-pro": [24, 48, 64], "m4-max": [36, 48, 64, 128],
}


def test_every_apple_chip_is_catalogued_in_every_size_sold_as_unified_memory():
    apple = {g.id: g for g in vramwise.list_gpus() if g.vendor == "apple"}
    want = {f"apple-{chip}-{gb}gb": gb for chip, sizes in APPLE_SIZES.items() for gb in sizes}
    assert set(apple) == set(want)
    for gid, gb in want.items():
        g = apple[gid]
        assert g.memory_bytes == gb * 2**30, gid  # Apple's "NGB" of unified memory, N x 2**30 bytes
        assert g.unified and g.budget == "macos-working-set" and not g.nvml_visible, gid
        assert "support.apple.com" in g.source, gid


def test_only_unified_entries_name_a_budget_and_every_rule_has_a_source():
    for g in vramwise.list_gpus():
        assert (g.budget is not None) == g.unified, g.id
        if g.unified:
            rule = unified_budget(g).rule
            assert rule.source.strip() and rule.share.strip(), g.id


def test_apple_budget_is_the_macos_default_working_set():
    # M3 Max 128GB: memory 128 x 2**30 = 137,438,953,472 B, above 36 GiB, so three quarters:
    # 137,438,953,472 x 3 // 4 = 103,079,215,104 B = 96 GiB; the OS and other processes keep 32 GiB
    b = unified_budget(vramwise.gpu_spec("M3 Max 128GB"))
    assert b.memory_bytes == 137_438_953_472
    assert b.gpu_bytes == 103_079_215_104
    assert b.kept_bytes == 34_359_738_368
    # M3 Pro 18GB: 18 x 2**30 = 19,327,352,832 B, at most 36 GiB, so two thirds: 12,884,901,888 B = 12 GiB
    assert unified_budget(vramwise.gpu_spec("M3 Pro 18GB")).gpu_bytes == 12_884_901_888
    # M3 Max 36GB sits on the boundary (36 GiB is "up to 36 GiB"): 38,654,705,664 x 2 // 3 = 25,769,803,776 (24 GiB)
    assert unified_budget(vramwise.gpu_spec("m3 max 36gb")).gpu_bytes == 25_769_803_776
    # M1 8GB: 8,589,934,592 x 2 = 17,179,869,184, // 3 = 5,726,623,061 (5.33 GiB; exo-explore/exo#1672 and
    # SceneWorks#1552 report two thirds on 8 and 16 GB Macs)
    assert unified_budget(vramwise.gpu_spec("M1 8GB")).gpu_bytes == 5_726_623_061


def test_strix_halo_budget_is_the_largest_variable_graphics_memory():
    # 128 x 2**30 x 3 // 4 = 96 x 2**30 = 103,079,215,104 B: AMD's "96GB of Variable Graphics Memory" on 128GB
    b = unified_budget(vramwise.gpu_spec("Strix Halo 128GB"))
    assert b.gpu_id == "ryzen-ai-max-395-128gb" and b.gpu_bytes == 103_079_215_104
    # 64 x 2**30 x 3 // 4 = 48 x 2**30 = 51,539,607,552 B
    assert unified_budget(vramwise.gpu_spec("strix halo 64gb")).gpu_bytes == 51_539_607_552


def test_discovery_and_the_catalog_share_one_rule():
    from vramwise.gpus.backends import APPLE_BUDGET_RULE, apple_default_working_set

    for gb in (8, 16, 36, 48, 128):
        memory = gb * 2**30
        assert apple_default_working_set(memory) == budget_for_memory(APPLE_BUDGET_RULE, memory)
    assert vramwise.gpu_spec("M4 Max 128GB").budget == APPLE_BUDGET_RULE


@pytest.mark.parametrize("query, gpu_id", [
    ("M3 Max 128GB", "apple-m3-max-128gb"), ("M2 Max 64GB", "apple-m2-max-64gb"), ("m4 pro 48gb", "apple-m4-pro-48gb"),
    ("Apple M2 Ultra 192GB", "apple-m2-ultra-192gb"), ("Strix Halo 128GB", "ryzen-ai-max-395-128gb"),
    ("Ryzen AI Max+ 395 64GB", "ryzen-ai-max-395-64gb"),
])
def test_unified_names_as_people_type_them(query, gpu_id):
    assert vramwise.gpu_spec(query).id == gpu_id


def test_a_bare_chip_name_is_ambiguous_among_its_sizes():
    g = vramwise.gpu_spec("M3 Max")
    assert g.matched_by == "ambiguous" and g.id == "apple-m3-max-36gb"
    assert set(g.alternatives) == {"apple-m3-max-48gb", "apple-m3-max-64gb", "apple-m3-max-96gb", "apple-m3-max-128gb"}
    assert "base configuration" in g.note
    assert vramwise.gpu_spec("strix halo").alternatives == ("ryzen-ai-max-395-128gb",)


def test_a_size_stays_dedicated_memory():
    g = vramwise.gpu_spec("64GB")
    assert g.memory_bytes == 64 * 10**9 and not g.unified and unified_budget(g) is None


def test_the_budget_line_says_unified_memory_the_share_and_the_rule():
    line = unified_budget(vramwise.gpu_spec("M3 Max 128GB")).line()
    assert "\n" not in line
    assert line.startswith("unified memory: the GPU may use 96.00 GiB of the system's 128.00 GiB (75.0 %")
    assert "macos-working-set" in line and "hardware/gpus.yaml" in line and "keep 32.00 GiB" in line


_UNIFIED = _MINIMAL.replace("[Shared]", "[other]") + """\
  - id: three
    name: Three
    vendor: apple
    memory_bytes: 4096
    memory_reading: spec-sheet
    source: test
    aliases: []
    nvml_visible: false
    unified: true
    budget: half
unified_budgets:
  - id: half
    gpu_may_use: memory // 2
    share: half
    source: test
"""


def test_a_budget_rule_is_evaluated_from_the_file():
    cat = build_catalog(_UNIFIED, "gpus.yaml")
    assert cat.budgets["half"].gpu_bytes(4096) == 2048  # 4096 // 2


def test_a_unified_entry_without_a_known_rule_is_rejected_with_its_position():
    with pytest.raises(FileFormatError, match=r"gpus.yaml:\d+:\d+: \$.gpus\[2\].budget: unknown budget rule 'whole'"):
        build_catalog(_UNIFIED.replace("budget: half", "budget: whole"), "gpus.yaml")
    with pytest.raises(FileFormatError, match=r"\$.gpus\[2\].unified: a unified entry names its budget rule"):
        build_catalog(_UNIFIED.replace("    budget: half\n", ""), "gpus.yaml")


def test_a_budget_expression_outside_the_language_is_rejected_with_its_position():
    with pytest.raises(FileFormatError, match=r"gpus.yaml:\d+:\d+: \$.unified_budgets\[0\].gpu_may_use"):
        build_catalog(_UNIFIED.replace("memory // 2", "__import__('os')"), "gpus.yaml")
