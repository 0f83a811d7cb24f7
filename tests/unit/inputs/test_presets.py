"""Runtime presets (vramwise.inputs.presets): formulas/ollama.yaml against its schema, an Ollama Modelfile's
PARAMETER lines, the OLLAMA_* variables and Ollama's defaults, each read into the llama.cpp profile's settings with
its origin. The expected settings follow Ollama v0.32.15's code as the file cites it:

- the context per request: num_ctx (a Modelfile's) or OLLAMA_CONTEXT_LENGTH, else by the GPUs' memory 262,144 from
  47 GiB, 32,768 from 23 GiB, else 4,096 (server/routes.go:2044-2058); at least 4 (server/sched.go:170-172); at most
  the training context (llm/server.go:112-116);
- llama-server's -c is that context x OLLAMA_NUM_PARALLEL, -np the latter (llm/llama_server.go:375-376);
- num_batch (512) is both -b and -ub (:590-592); num_gpu -1 passes no -ngl (:404-410);
- OLLAMA_KV_CACHE_TYPE, lower-cased, is both cache types (llm/server.go:118, llama_server.go:394-396);
- OLLAMA_FLASH_ATTENTION is read by strconv.ParseBool, any other text true (envconfig/config.go:177-190), unset auto.
"""

from __future__ import annotations

from importlib import resources

import pytest

from vramwise.errors import FileFormatError, SettingsError
from vramwise.inputs.presets import compile_preset, preset, preset_settings, read_modelfile
from vramwise.rules.datafiles import load_data_file

GIB = 2**30
SCHEMA = "preset-1.schema.json"


def _text() -> str:
    return resources.files("vramwise.formulas").joinpath("ollama.yaml").read_text(encoding="utf-8")


def test_the_shipped_file_is_valid():
    p = compile_preset(load_data_file(_text(), "formulas/ollama.yaml", SCHEMA, validate=True))
    assert (p.name, p.profile, p.release) == ("ollama", "llama.cpp", "0.32.15")
    assert {o.name for o in p.options} == {"num_ctx", "num_parallel", "num_batch", "num_gpu", "flash_attention",
                                           "kv_cache_type"}


def test_a_bad_expression_names_its_place():
    text = _text().replace("expr: context * num_parallel", "expr: context * num_paralel")
    with pytest.raises(FileFormatError) as e:
        compile_preset(load_data_file(text, "ollama.yaml", SCHEMA, validate=True))
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "num_paralel" in row)
    assert f"ollama.yaml:{line}:" in str(e.value) and "num_paralel" in str(e.value)


def test_a_bad_key_names_its_json_path():
    text = _text().replace("    type: int\n    default: 512", "    type: integer\n    default: 512")
    with pytest.raises(FileFormatError, match=r"ollama\.yaml:\d+:\d+: \$\.options\.num_batch\.type"):
        load_data_file(text, "ollama.yaml", SCHEMA, validate=True)


@pytest.mark.parametrize("memory, n_ctx", [
    (8 * GIB, 4096),          # below 23 GiB
    (23 * GIB, 32768),        # 23 GiB reaches the middle tier
    (24 * GIB, 32768),
    (47 * GIB, 131072),       # 262,144 capped at the training context of 131,072
])
def test_default_context_by_the_gpu_memory(memory, n_ctx):
    got = preset_settings("ollama", ctx_train=131072, gpu_total=memory)
    assert got.settings["n_ctx"] == n_ctx
    assert got.origins["n_ctx"] == "ollama 0.32.15 default for the GPU's memory"


def test_the_defaults():
    got = preset_settings("ollama", ctx_train=8192, gpu_total=8 * GIB)
    assert got.settings == {"n_ctx": 4096, "n_parallel": 1, "n_batch": 512, "n_ubatch": 512, "n_gpu_layers": None,
                            "cache_type_k": "f16", "cache_type_v": "f16", "flash_attn": "auto"}
    assert set(got.origins.values()) == {"ollama 0.32.15 default", "ollama 0.32.15 default for the GPU's memory"}


def test_no_gpu_and_no_num_ctx_is_one_clear_line():
    with pytest.raises(SettingsError, match="give the GPU .* or PARAMETER num_ctx or OLLAMA_CONTEXT_LENGTH") as e:
        preset_settings("ollama", ctx_train=8192)
    assert "\n" not in str(e.value)


def test_modelfile_and_environment(tmp_path):
    mf = tmp_path / "Modelfile"
    mf.write_text('# a comment\nFROM ./model.gguf\nSYSTEM """one\nPARAMETER num_ctx 99\n"""\n'
                  "PARAMETER num_ctx 2048\nparameter num_gpu 10\nPARAMETER temperature 0.7\nPARAMETER num_batch 256\n")
    env = {"OLLAMA_NUM_PARALLEL": "3", "OLLAMA_CONTEXT_LENGTH": "16384", "OLLAMA_KV_CACHE_TYPE": "Q8_0",
           "OLLAMA_FLASH_ATTENTION": "1"}
    got = preset_settings("ollama", modelfile=str(mf), environ=env, ctx_train=32768)
    # the Modelfile's num_ctx (line 6; the one inside the triple-quoted SYSTEM is text) wins over OLLAMA_CONTEXT_LENGTH;
    # -c 2,048 x 3
    assert got.settings["n_ctx"] == 6144 and got.settings["n_parallel"] == 3
    assert (got.settings["n_batch"], got.settings["n_ubatch"], got.settings["n_gpu_layers"]) == (256, 256, 10)
    assert (got.settings["cache_type_k"], got.settings["cache_type_v"], got.settings["flash_attn"]) == \
        ("q8_0", "q8_0", "on")
    assert got.origins["n_ctx"] == f"environment OLLAMA_NUM_PARALLEL=3; Modelfile {mf}:6 (PARAMETER num_ctx)"
    assert got.origins["n_gpu_layers"] == f"Modelfile {mf}:7 (PARAMETER num_gpu)"
    assert got.origins["cache_type_k"] == "environment OLLAMA_KV_CACHE_TYPE=Q8_0"
    assert read_modelfile(str(mf)).model == "./model.gguf"
    # without the environment read, the variables are not
    assert preset_settings("ollama", modelfile=str(mf), ctx_train=32768).settings["n_parallel"] == 1


@pytest.mark.parametrize("text, mode", [("0", "off"), ("false", "off"), ("F", "off"), ("true", "on"), ("T", "on"),
                                        ("yes", "on")])  # ParseBool fails on "yes": BoolWithDefault reads true
def test_flash_attention_words(text, mode):
    env = {"OLLAMA_FLASH_ATTENTION": text, "OLLAMA_CONTEXT_LENGTH": "4096"}
    assert preset_settings("ollama", environ=env).settings["flash_attn"] == mode


def test_context_bounds():
    # num_ctx 1 -> 4 (the scheduler's least); 100,000 -> the training context 8,192
    assert preset_settings("ollama", environ={"OLLAMA_CONTEXT_LENGTH": "1"}, ctx_train=8192).settings["n_ctx"] == 4
    assert preset_settings("ollama", environ={"OLLAMA_CONTEXT_LENGTH": "100000"}, ctx_train=8192).settings["n_ctx"] == 8192
    assert preset_settings("ollama", environ={"OLLAMA_CONTEXT_LENGTH": "100000"}).settings["n_ctx"] == 100000  # unknown


def test_num_gpu_zero_is_the_cpu():
    got = preset_settings("ollama", modelfile=read_modelfile("M", text="PARAMETER num_gpu 0\nPARAMETER num_ctx 512\n"))
    assert got.settings["n_gpu_layers"] == 0


@pytest.mark.parametrize("text, where", [
    ("FROM x\nPARAMETER num_ctx lots\n", "M:2: num_ctx must be a whole number"),
    ("FROM x\n  = nothing\n", "M:2:1: not a Modelfile command"),
    ("PARAMETER num_ctx\n", "M:1:1: PARAMETER takes a name and a value"),
])
def test_modelfile_problems_name_the_line(text, where):
    with pytest.raises(SettingsError) as e:
        preset_settings("ollama", modelfile=read_modelfile("M", text=text), gpu_total=8 * GIB)
    assert where in str(e.value)


def test_unknown_preset():
    with pytest.raises(SettingsError, match="unknown preset 'lmstudio'"):
        preset("lmstudio")
