"""Every shipped file validates; broken files are rejected with path:line:col and the JSON path.

The formula folders share what is shared: each constant and table is defined in one file, a formula
is written once however many profiles use it, the files several profiles use live in
formulas/shared (no profile lists another profile's file), each profile.yaml lists its files one
per line in reading order, and every formula's trace location is the line of its own expression.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

import vramwise
from vramwise import ExpressionError, FileFormatError
from vramwise.profiles.graphs import GraphExpression

FAMILIES = Path(str(resources.files("vramwise.families")))
FORMULAS = Path(str(resources.files("vramwise.formulas")))


def test_shipped_files_load(registry):
    registry.check_all()
    # the bundled registry skips schema validation at run time; here every file is validated
    assert not registry.validate
    vramwise.Registry(validate=True).check_all()
    assert {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "generic"} <= set(registry.families)
    prof = registry.profile("unsloth")
    assert prof.components["weights"] == "weights_bytes"


def _families_copy(tmp_path: Path, reached: str = "llama") -> Path:
    """A families folder of the bundled family ``reached`` and the families it extends, with their stack overlays
    (the facts the profiles read): where a test's file is checked, next to the family it extends. The whole
    bundled tree is checked once, by test_shipped_files_load, not again around each broken file."""
    dst = tmp_path / "families"
    dst.mkdir()
    names = []
    while reached is not None:
        names.append(reached)
        reached = yaml.safe_load((FAMILIES / f"{reached}.yaml").read_text(encoding="utf-8")).get("extends")
    for name in names:
        shutil.copy(FAMILIES / f"{name}.yaml", dst / f"{name}.yaml")
        for overlay in (FAMILIES / "stacks").glob(f"*/{name}.yaml"):
            (dst / "stacks" / overlay.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(overlay, dst / "stacks" / overlay.parent.name / overlay.name)
    assert len(names) > 1 and (dst / "stacks").is_dir()  # llama extends decoder; both have stack overlays
    return dst


def _write(folder: Path, name: str, text: str) -> Path:
    p = folder / name
    p.write_text(text)
    return p


def test_unknown_key_is_named_with_its_position(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_type: [z]\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    msg = str(info.value)
    assert f"{fam / 'broken.yaml'}:6:1: $.model_type: unknown key 'model_type'" in msg


def test_bad_enum_points_at_the_node(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "broken.yaml",
        "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_types: [z]\n"
        "layers:\n  modules:\n    q_proj:\n      kind: linaer\n",
    )
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    msg = str(info.value)
    assert "broken.yaml:10:13: $.layers.modules.q_proj.kind: 'linaer' is not one of" in msg


def test_invalid_yaml(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: [unclosed\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:3:1: $: invalid YAML" in str(info.value)


def test_duplicate_keys_rejected(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "broken.yaml", "schema_version: 1\nfamily: broken\nfamily: broken\ndescription: x\nsource: y\nextends: llama\n")
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:3:1: $: duplicate key 'family'" in str(info.value)


def test_expression_with_unknown_name_in_family(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "broken.yaml",
        "schema_version: 1\nfamily: broken\ndescription: x\nsource: y\nextends: llama\nmodel_types: [z]\n"
        "layers:\n  attributes:\n    mlp_width:\n      expr: intermediate_sise * 2\n",
    )
    with pytest.raises(ExpressionError) as info:
        vramwise.Registry(families_dir=fam).check_all()
    assert "broken.yaml:10:13: $.layers.attributes.mlp_width.expr: unknown name `intermediate_sise`" in str(info.value)


def test_missing_parent_and_cycle(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "a.yaml", "schema_version: 1\nfamily: a\ndescription: x\nsource: y\nextends: b\n")
    _write(fam, "b.yaml", "schema_version: 1\nfamily: b\ndescription: x\nsource: y\nextends: a\n")
    with pytest.raises(FileFormatError, match="inheritance cycle"):
        vramwise.Registry(families_dir=fam).check_all()
    (fam / "b.yaml").unlink()
    with pytest.raises(FileFormatError, match=r"a\.yaml:5:10: \$\.extends: unknown family 'b'"):
        vramwise.Registry(families_dir=fam).check_all()


def test_model_type_served_twice(tmp_path):
    fam = _families_copy(tmp_path)
    _write(fam, "twin.yaml", "schema_version: 1\nfamily: twin\ndescription: x\nsource: y\nextends: llama\nmodel_types: [llama]\n")
    with pytest.raises(FileFormatError, match="already served by family 'llama'"):
        vramwise.Registry(families_dir=fam).check_all()


def _formulas_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "formulas"
    for folder in ("studio", "shared"):  # the studio profile and the shared files it lists
        shutil.copytree(FORMULAS / folder, dst / folder, ignore=shutil.ignore_patterns("__*"))
    return dst


def test_formula_file_errors(tmp_path):
    forms = _formulas_copy(tmp_path)
    p = forms / "studio" / "optimizer.yaml"
    p.write_text(p.read_text().replace("expr: trainable_params * optimizer_bytes_per_param", "expr: trainable_params ^ 2"))
    reg = vramwise.Registry(formulas_dir=forms)
    with pytest.raises(ExpressionError) as info:
        reg.profile("studio")
    assert "optimizer.yaml:" in str(info.value) and "bitwise XOR" in str(info.value)
    assert "$.formulas[1].expr" in str(info.value)


def test_formula_cycle_and_missing_field(tmp_path):
    forms = _formulas_copy(tmp_path)
    p = forms / "studio" / "lora.yaml"
    p.write_text(p.read_text().replace("expr: lora_params * lora_bytes_per_param", "expr: lora_bytes_again"))
    p.write_text(p.read_text() + "  - id: lora_bytes_again\n    expr: lora_bytes\n    unit: bytes\n    description: x\n    source: y\n")
    reg = vramwise.Registry(formulas_dir=forms)
    with pytest.raises(FileFormatError, match="formula cycle"):
        reg.profile("studio")
    p.write_text(p.read_text().replace("    source: y\n", ""))
    with pytest.raises(FileFormatError, match=r"lora\.yaml:\d+:\d+: \$\.formulas\[2\]: 'source' is a required property"):
        vramwise.Registry(formulas_dir=forms).profile("studio")


def test_profile_needs_inputs_from_every_family(tmp_path):
    fam = _families_copy(tmp_path)
    _write(
        fam, "nomlp.yaml",
        "schema_version: 1\nfamily: nomlp\ndescription: x\nsource: y\nextends: llama\nmodel_types: [nomlp]\n"
        "layers:\n  attributes:\n    mlp_width: null\n  modules:\n    gate_proj: null\n    up_proj: null\n    down_proj: null\n",
    )
    reg = vramwise.Registry(families_dir=fam)
    with pytest.raises(FileFormatError, match="family nomlp lacks what profile unsloth needs: layer attribute mlp_width"):
        reg.check_all()
    with pytest.raises(FileFormatError, match="family nomlp lacks"):
        vramwise.estimate({"model_type": "nomlp", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
                           "num_attention_heads": 2, "intermediate_size": 8}, registry=reg)


def test_schemas_are_valid_json_schema():
    from jsonschema import Draft202012Validator

    from vramwise.rules.datafiles import load_schema

    for name in ("family-1.schema.json", "formulas-1.schema.json", "profile-1.schema.json"):
        Draft202012Validator.check_schema(load_schema(name))


def test_unknown_profile(registry):
    with pytest.raises(vramwise.SettingsError, match="unknown profile 'nope'"):
        registry.profile("nope")


REPO = Path(__file__).resolve().parents[3]
SHARED = "shared"  # formulas/shared: the files several profiles list


def _yaml(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _profiles() -> dict[str, Path]:
    return {p.parent.name: p for p in sorted(FORMULAS.glob("*/profile.yaml"))}


def _formula_files() -> list[Path]:
    """Every formula file: the profiles', formulas/shared's and the strategies' (not the manifests)."""
    return [p for p in sorted(FORMULAS.glob("*/*.yaml")) if p.name not in ("profile.yaml", "strategies.yaml")]


def test_profiles_list_their_files_one_per_line():
    for name, path in _profiles().items():
        node = yaml.compose(path.read_text(encoding="utf-8"))
        files = next(v for k, v in node.value if k.value == "files")
        assert isinstance(files, yaml.SequenceNode) and not files.flow_style, f"{name}: files: is not a block list"
        lines = [item.start_mark.line for item in files.value]
        assert lines == list(range(lines[0], lines[0] + len(lines))), f"{name}: one file per line, in order"


def test_profiles_borrow_only_from_the_shared_folder():
    for name, path in _profiles().items():
        for entry in _yaml(path)["files"]:
            folder, _, leaf = entry.rpartition("/")
            assert folder in ("", SHARED), f"formulas/{name}/profile.yaml lists {entry}: another profile's file"
            assert (FORMULAS / (folder or name) / leaf).is_file(), entry


def test_every_shared_file_is_listed_by_two_profiles_at_least():
    listed: dict[str, list[str]] = {}
    for name, path in _profiles().items():
        for entry in _yaml(path)["files"]:
            listed.setdefault(entry, []).append(name)
    shared = sorted(p.name for p in (FORMULAS / SHARED).glob("*.yaml"))
    assert {"constants.yaml", "overhead.yaml", "total.yaml"} <= set(shared)
    for leaf in shared:
        users = listed.get(f"{SHARED}/{leaf}", [])
        assert len(users) >= 2, f"formulas/shared/{leaf} is listed by {users or 'no profile'}: it belongs to one profile's folder"


def test_each_constant_and_table_is_defined_once():
    """A constant has one home; so has a table, unless the stacks' tables differ (each stack takes
    other optimizers: optimizer_states and optimizer_fixed_bytes are each stack's own)."""
    homes: dict[object, list[str]] = {}
    for path in _formula_files():
        data = _yaml(path)
        where = f"{path.parent.name}/{path.name}"
        for name in data.get("constants") or ():
            homes.setdefault(name, []).append(where)
        for name, t in (data.get("tables") or {}).items():
            homes.setdefault((name, t["key"], tuple(sorted(t["entries"].items())), t.get("default")), []).append(where)
    twice = {name if isinstance(name, str) else name[0]: where for name, where in homes.items() if len(where) > 1}
    assert not twice, f"defined in several files (one home in formulas/shared instead): {twice}"
    # the element sizes every stack reads live in the shared constants
    shared = _yaml(FORMULAS / SHARED / "constants.yaml")["constants"]
    assert {"bf16_bytes", "fp32_bytes", "gib"} <= set(shared)
    assert (shared["bf16_bytes"]["value"], shared["fp32_bytes"]["value"], shared["gib"]["value"]) == (2, 4, 2**30)


def test_no_formula_is_copied_into_three_profiles():
    """A formula written alike (id, scope, expression) in three or more profile folders is defined once
    in formulas/shared. (Two stacks whose code happens to give the same arithmetic keep their own
    entries, each citing its own stack.)"""
    homes: dict[tuple, list[str]] = {}
    for path in _formula_files():
        if path.parent.name in ("strategies", SHARED):
            continue
        for f in _yaml(path).get("formulas") or ():
            key = (f["id"], f.get("scope", "model"), " ".join(str(f["expr"]).split()))
            homes.setdefault(key, []).append(path.parent.name)
    copied = {key[0]: where for key, where in homes.items() if len(set(where)) >= 3}
    assert not copied, f"formulas copied into several profiles (define them once in formulas/shared): {copied}"
    shared = {f["id"] for p in (FORMULAS / SHARED).glob("*.yaml") for f in _yaml(p).get("formulas") or ()}
    assert {"tokens", "adapters_per_layer", "adapter_inputs_per_layer", "layer_saved_bytes", "head_gradient_bytes",
            "lora_params", "tensor_peak_bytes"} <= shared


def test_every_formula_is_traced_to_its_own_line(registry):
    """The trace's file:line of each formula (every profile, every strategy) is a line of that formula's entry."""
    profiles = [registry.profile(p) for p in registry.profile_names()]
    profiles += [registry.profile(p, s) for s in registry.strategy_names() for p in registry.strategy_info(s)["profiles"]]
    texts: dict[str, list[str]] = {}
    checked = 0
    for prof in profiles:
        for f in prof.formulas:
            lines = texts.setdefault(f.expr.file, (REPO / f.expr.file).read_text(encoding="utf-8").splitlines())
            if isinstance(f.expr, GraphExpression):  # a file's graph section: traced to its id, under `graph:`
                assert lines[f.expr.line - 1].strip() == f"id: {f.id}", (f.expr.where, f.id)
                assert lines[f.expr.line - 2].rstrip() == "graph:", (f.expr.where, f.id)
                checked += 1
                continue
            entry = next(line for line in reversed(lines[: f.expr.line]) if line.lstrip().startswith("- id:"))
            assert entry.split("- id:", 1)[1].strip() == f.id, (f.expr.where, f.id, entry)
            assert "expr" in lines[f.expr.line - 1] or "cases" in lines[f.expr.line - 1], (f.expr.where, f.id)
            checked += 1
        for c in prof.constant_info.values():
            file, line, _ = c.where.rsplit(":", 2)
            lines = texts.setdefault(file, (REPO / file).read_text(encoding="utf-8").splitlines())
            assert lines[int(line) - 1].strip().startswith(f"{c.name}:"), (c.where, c.name)
    assert checked > 300
    hf = registry.profile("hf")
    assert hf.formula("tokens").expr.file == "formulas/shared/activations.yaml"
    assert hf.formula("reserved_bytes").expr.file == "formulas/shared/overhead.yaml"
    assert hf.constant_info["bf16_bytes"].where.startswith("formulas/shared/constants.yaml:")


def test_a_shared_file_is_one_object_in_every_profile_that_lists_it(registry):
    # the same text, compiled into each profile: one definition, one location
    for fid in ("tokens", "layer_saved_bytes", "lora_params", "head_gradient_bytes", "tensor_peak_bytes"):
        wheres = {registry.profile(p).formula(fid).expr.where for p in ("hf", "torchtune", "litgpt")}
        assert len(wheres) == 1 and next(iter(wheres)).startswith("formulas/shared/"), (fid, wheres)


def _hf_with_files(tmp_path: Path, entries: list[str]) -> Path:
    """A copy of the bundled formulas whose hf profile lists ``entries`` instead of its files."""
    forms = tmp_path / "formulas"
    shutil.copytree(FORMULAS, forms, ignore=shutil.ignore_patterns("__*"))
    manifest = forms / "hf" / "profile.yaml"
    data = manifest.read_text(encoding="utf-8")
    head, rest = data.split("files:", 1)
    tail = rest[rest.index("\ninputs:"):]
    manifest.write_text(head + "files:\n" + "".join(f"  - {e}\n" for e in entries) + tail.lstrip("\n"), encoding="utf-8")
    return forms


def test_a_listed_file_that_is_missing_is_located_at_its_entry(tmp_path):
    entries = _yaml(FORMULAS / "hf" / "profile.yaml")["files"]
    k = entries.index("shared/phases.yaml")
    forms = _hf_with_files(tmp_path, entries[:k] + ["shared/nosuch.yaml"] + entries[k + 1:])
    manifest = forms / "hf" / "profile.yaml"
    line = manifest.read_text(encoding="utf-8").splitlines().index("  - shared/nosuch.yaml") + 1
    with pytest.raises(FileFormatError) as info:
        vramwise.Registry(formulas_dir=forms).profile("hf")
    assert f"{manifest}:{line}:5: $.files[{k}]: listed file 'shared/nosuch.yaml' does not exist" in str(info.value)


def test_a_file_of_no_folder_is_located_at_its_entry(tmp_path):
    entries = _yaml(FORMULAS / "hf" / "profile.yaml")["files"]
    forms = _hf_with_files(tmp_path, ["common/constants.yaml"] + entries[1:])
    with pytest.raises(FileFormatError, match=r"profile\.yaml:\d+:5: \$\.files\[0\]: listed file 'common/constants\.yaml': "
                                              r"'common' is not another profile nor a folder of shared formula files"):
        vramwise.Registry(formulas_dir=forms).profile("hf")


def test_a_profile_without_the_shared_constants_names_what_it_misses(tmp_path):
    entries = [e for e in _yaml(FORMULAS / "hf" / "profile.yaml")["files"] if e != "shared/constants.yaml"]
    forms = _hf_with_files(tmp_path, entries)
    with pytest.raises(ExpressionError, match=r"formulas/hf/weights\.yaml:\d+:\d+: \$\.formulas\[\d+\]\.expr: unknown name `fp32_bytes`"):
        vramwise.Registry(formulas_dir=forms).profile("hf")


def test_every_formula_folder_is_packaged():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = sorted(p.name for p in FORMULAS.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    assert SHARED in folders
    for folder in folders:
        if not folder.isidentifier():  # a profile named as its runtime (llama.cpp): data files of vramwise.formulas
            assert f"{folder}/*.yaml" in config["package-data"]["vramwise.formulas"], folder
            continue
        package = f"vramwise.formulas.{folder}"
        assert package in config["packages"], package
        assert config["package-data"].get(package) == ["*.yaml"], package


def test_check_takes_the_shared_folder_like_a_profile_folder(tmp_path):
    assert vramwise.check([FORMULAS / SHARED]) == []
    shared = tmp_path / SHARED
    shutil.copytree(FORMULAS / SHARED, shared, ignore=shutil.ignore_patterns("__*"))
    p = shared / "activations.yaml"
    p.write_text(p.read_text(encoding="utf-8").replace("expr: batch_size * seq_len", "expr: batch_size * seq_lenn"),
                 encoding="utf-8")
    line = p.read_text(encoding="utf-8").splitlines().index("    expr: batch_size * seq_lenn") + 1
    for given in (shared, p):  # the folder, or one of its files
        problems = vramwise.check([given])
        # every profile that lists the file compiles it; the problem is reported once, at the given file
        assert problems == [f"{p}:{line}:11: $.formulas[0].expr: unknown name `seq_lenn` in `batch_size * seq_lenn`"]


@pytest.mark.parametrize("package", ["vramwise.formulas", "vramwise.schemas", "vramwise.families", "vramwise.accuracy",
                                     "vramwise.hardware", "vramwise.catalog", "vramwise.frameworks"])
def test_package_files_are_the_files_importlib_resources_gives(package):
    """datafiles.package_files (no import of importlib.resources on a command's path) names the folder whose files
    importlib.resources.files gives, name for name and byte for byte."""
    from importlib import resources

    from vramwise.rules.datafiles import package_files

    ours, theirs = package_files(package), resources.files(package)
    names = sorted(p.name for p in ours.iterdir() if p.is_file())
    assert names and names == sorted(p.name for p in theirs.iterdir() if p.is_file())
    for name in names:
        assert ours.joinpath(name).read_bytes() == theirs.joinpath(name).read_bytes()
