"""The compiled data kept between processes (vramwise.rules.diskcache): a data file's composed data and positions,
and the checked expressions, give what composing and checking them again gives, and a cache that is corrupt,
stale, turned off or not writable changes no figure and raises nothing."""

import hashlib
import marshal
import os
import shutil
import stat
from pathlib import Path

import pytest

import vramwise
from vramwise.estimation.checked import CHECKED
from vramwise.rules import diskcache
from vramwise.rules.datafiles import VALID_TEXTS, DataFile, load_data_file
from vramwise.rules.expr.language import CHECKED_EXPRESSIONS, STORED_EXPRESSIONS, compile_expression

ROOT = Path(__file__).resolve().parents[3]
LLAMA = ROOT / "examples" / "llama-3.1-8b.json"
SETTINGS = dict(method="qlora", batch_size=4, seq_len=2048)


def _forget() -> None:
    """What this process keeps in memory, so that the next registry reads the cache on disk (or the files)."""
    STORED_EXPRESSIONS.save()
    for cache in (CHECKED_EXPRESSIONS, STORED_EXPRESSIONS, VALID_TEXTS, CHECKED):
        cache.clear()


def _figures(registry=None, profile="unsloth") -> tuple:
    _forget()
    e = vramwise.estimate(str(LLAMA), profile=profile, registry=registry or vramwise.Registry(), **SETTINGS)
    return e.total, tuple(getattr(e, c) for c in vramwise.COMPONENTS), tuple(e.warnings)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", str(folder))
    yield folder
    _forget()


@pytest.fixture(scope="module")
def uncached():
    """The figures with the cache turned off, for both profiles the CLI's estimate reads."""
    old = os.environ.get("VRAMWISE_CACHE_DIR")
    os.environ["VRAMWISE_CACHE_DIR"] = "off"
    try:
        return {p: _figures(profile=p) for p in ("unsloth", "hf")}
    finally:
        os.environ["VRAMWISE_CACHE_DIR"] = old if old is not None else ""
        _forget()


def _entries(folder: Path, kind: str) -> list[Path]:
    return sorted((folder / kind).iterdir()) if (folder / kind).is_dir() else []


@pytest.mark.parametrize("value", ["", "off", "OFF", " none "])
def test_the_cache_is_turned_off_by_an_empty_or_off_folder(monkeypatch, value):
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", value)
    assert diskcache.cache_dir() is None
    assert diskcache.put("datafiles", b"k", {"a": 1}) is False
    assert diskcache.get("datafiles", b"k") is None


def test_the_default_folder_is_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("VRAMWISE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert diskcache.cache_dir() == str(tmp_path / "vramwise")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert diskcache.cache_dir() == str(tmp_path / "home" / ".cache" / "vramwise")


def test_cold_and_warm_cache_give_the_figures_of_no_cache(cache, uncached):
    for profile in ("unsloth", "hf"):
        assert _figures(profile=profile) == uncached[profile]  # cold: composes, checks and stores
    assert _entries(cache, "datafiles") and _entries(cache, "expressions")
    assert len(_entries(cache, "expressions")) > 2  # one entry per data file read: the family's, each profile file's
    for profile in ("unsloth", "hf"):
        assert _figures(profile=profile) == uncached[profile]  # warm: reads what was stored


def test_turned_off_writes_nothing_and_gives_the_same_figures(cache, uncached, monkeypatch):
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", "off")
    assert _figures() == uncached["unsloth"]
    assert not cache.exists()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty"])
def test_a_corrupt_entry_is_ignored_and_written_again(cache, uncached, damage):
    assert _figures() == uncached["unsloth"]
    entries = _entries(cache, "datafiles") + _entries(cache, "expressions") + _entries(cache, "programs")
    assert _entries(cache, "programs")
    for path in entries:
        raw = path.read_bytes()
        path.write_bytes({"garbage": b"\x00not an entry", "truncated": raw[: len(raw) // 2],
                          "flipped": raw[:-1] + bytes([raw[-1] ^ 0xFF]), "empty": b""}[damage])
    assert _figures() == uncached["unsloth"]
    for path in entries:  # written again whole: its checksum holds again
        raw = path.read_bytes()
        assert len(raw) > 16 and hashlib.blake2b(raw[16:], digest_size=16).digest() == raw[:16], (damage, path)
    assert _figures() == uncached["unsloth"]


def test_an_entry_of_other_content_under_the_right_name_is_not_used(cache, uncached):
    """An entry that decodes to a value of the wrong shape (another format's) is a miss."""
    assert _figures() == uncached["unsloth"]
    for path in _entries(cache, "datafiles"):
        body = marshal.dumps(["not", "a", "data", "file"])
        path.write_bytes(hashlib.blake2b(body, digest_size=16).digest() + body)
    assert _figures() == uncached["unsloth"]


def test_a_read_only_cache_folder_gives_the_same_figures(cache, uncached):
    cache.mkdir()
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(cache, os.W_OK):
            pytest.skip("running as a user who may write anywhere: the folder is not read-only to it")
        assert _figures() == uncached["unsloth"]
        assert not any(cache.iterdir())
    finally:
        cache.chmod(stat.S_IRWXU)


def test_a_cache_folder_that_cannot_be_made_gives_the_same_figures(cache, uncached, monkeypatch):
    """Below a plain file no folder can be made, whoever runs (root included)."""
    blocker = cache.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", str(blocker / "cache"))
    assert _figures() == uncached["unsloth"]
    assert blocker.is_file()


def test_a_folder_others_may_write_to_is_not_read(cache):
    assert diskcache.put("datafiles", b"k", {"a": 1})
    assert diskcache.get("datafiles", b"k") == {"a": 1}
    (cache / "datafiles").chmod(0o777)
    try:
        assert diskcache.get("datafiles", b"k") is None
    finally:
        (cache / "datafiles").chmod(0o700)


def test_a_changed_data_file_is_read_again(cache, tmp_path, monkeypatch):
    """A copy of the bundled formulas, one file changed between two registries: the second reads the new bytes
    (a new digest, one new entry), and gives the figures of the changed file read without the cache."""
    formulas = tmp_path / "formulas"
    shutil.copytree(ROOT / "formulas", formulas)
    before = _figures(vramwise.Registry(ROOT / "families", formulas), profile="studio")
    assert _figures(vramwise.Registry(ROOT / "families", formulas), profile="studio") == before  # unchanged bytes, from the cache
    entries = set(_entries(cache, "datafiles"))
    optimizer = formulas / "studio" / "estimator.yaml"  # the studio profile's optimizer table
    text = optimizer.read_text()
    assert text.count("      adamw_8bit: 4\n") == 1
    optimizer.write_text(text.replace("      adamw_8bit: 4\n", "      adamw_8bit: 8\n"))
    changed = _figures(vramwise.Registry(ROOT / "families", formulas), profile="studio")
    assert len(set(_entries(cache, "datafiles")) - entries) == 1  # the edited file's new entry, nothing else
    # optimizer bytes = trainable params x bytes per param (formulas/studio/optimizer.yaml, its table in
    # formulas/studio/estimator.yaml): 4 -> 8 doubles it
    k = vramwise.COMPONENTS.index("optimizer")
    assert changed[1][k] == 2 * before[1][k] and changed[1][:k] == before[1][:k]
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", "off")
    assert _figures(vramwise.Registry(ROOT / "families", formulas), profile="studio") == changed


def test_positions_from_the_cache_are_the_composed_nodes(cache):
    """Every path and key of a bundled family and formula file: where() and key_where() of the entry read from the
    cache give the line and column of the composed node, and a path that does not exist the deepest node on it."""
    for path in (ROOT / "families" / "llama.yaml", ROOT / "formulas" / "unsloth" / "activations.yaml"):
        text = path.read_text()
        schema = "family-1.schema.json" if path.parent.name == "families" else "formulas-1.schema.json"
        composed = load_data_file(text, path.name, schema, validate=False)
        stored = load_data_file(text, path.name, schema, validate=False)
        assert composed.marks is None and stored.marks is not None and stored.root is None
        assert stored.data == composed.data
        fresh = DataFile(path=path.name, data=composed.data, root=composed.root)

        def paths(value, parts=()):
            yield parts
            if isinstance(value, dict):
                for k, v in value.items():
                    yield from paths(v, parts + (k,))
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    yield from paths(v, parts + (i,))

        every = list(paths(composed.data))
        assert len(every) > 20
        for parts in every + [("no such key",), every[-1] + ("deeper",)]:
            assert stored.where(parts) == fresh.where(parts), parts
            if parts:
                assert stored.key_where(parts) == fresh.key_where(parts), parts
        assert stored.root is not None  # the missing paths composed the nodes


def test_a_stored_expression_is_the_checked_one(cache):
    allowed = frozenset({"a", "b", "hidden_size"})
    first = compile_expression("a * b + hidden_size // 2 if a > 1 else b", allowed=allowed)
    STORED_EXPRESSIONS.save()
    CHECKED_EXPRESSIONS.clear()
    STORED_EXPRESSIONS.clear()
    again = compile_expression("a * b + hidden_size // 2 if a > 1 else b", allowed=allowed)
    assert again.names == first.names == {"a", "b", "hidden_size"}
    # 3 * 4 + 10 // 2 = 17 when a > 1; else b = 4
    assert again.evaluate({"a": 3, "b": 4, "hidden_size": 10}) == 17
    assert again.evaluate({"a": 1, "b": 4, "hidden_size": 10}) == 4
    assert again.names_read({"a": 1, "b": 4, "hidden_size": 10}) == {"a", "b"}
    # another set of allowed names is another entry: the check runs again and refuses
    with pytest.raises(vramwise.ExpressionError, match="unknown name `hidden_size`"):
        compile_expression("a * b + hidden_size // 2 if a > 1 else b", allowed=frozenset({"a", "b"}))


def test_a_stored_program_is_the_generated_one(cache, monkeypatch):
    """A profile's dynamic stage read back from the cache (kind ``programs``) is the program generated from its
    formulas: the same text and, run, the same figures; the warm path generates nothing."""
    from vramwise.rules.expr import codegen

    def program_of(registry):
        e = vramwise.estimate(str(LLAMA), registry=registry, **SETTINGS)
        profile = registry.profile("unsloth")
        (prog,) = profile._programs.values()
        return e, prog

    cold, generated = program_of(vramwise.Registry())
    assert len(_entries(cache, "programs")) == 1
    _forget()

    def no_generating(*args, **kwargs):
        raise AssertionError("the stored program was generated again")

    monkeypatch.setattr(codegen, "build_program", no_generating)
    warm, stored = program_of(vramwise.Registry())
    assert stored.text == generated.text and stored.inputs == generated.inputs
    assert (stored.model_ids, stored.layer_ids) == (generated.model_ids, generated.layer_ids)
    assert [getattr(warm, c) for c in vramwise.COMPONENTS] == [getattr(cold, c) for c in vramwise.COMPONENTS]
    assert warm.total == cold.total
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", "off")  # off: generated, whatever is stored
    with pytest.raises(AssertionError, match="generated again"):
        program_of(vramwise.Registry())


def test_the_family_index_from_the_cache_is_the_one_built(cache, tmp_path):
    """The index of model types (vramwise.models.family_index.build_index) read back from the cache is the one the
    family files give; a family file changed (a model type added) is a new key, and gives its new index."""
    from vramwise.models import family_index

    families = tmp_path / "families"
    shutil.copytree(ROOT / "families", families)
    built = vramwise.Registry(families, ROOT / "formulas")._by_type
    assert _entries(cache, "family-index")
    again = vramwise.Registry(families, ROOT / "formulas")
    assert again._by_type == built and list(again._by_type) == list(built)
    assert built["llama"] == "llama"  # families/llama.yaml serves model type llama
    llama = families / "llama.yaml"
    text = llama.read_text()
    assert text.count("model_types: [llama]\n") == 1
    llama.write_text(text.replace("model_types: [llama]\n", "model_types: [llama, llama_like_test_type]\n"))
    registry = vramwise.Registry(families, ROOT / "formulas")
    changed = registry._by_type
    assert changed["llama_like_test_type"] == "llama"
    assert len(_entries(cache, "family-index")) == 2
    assert family_index.build_index(registry._files) == (changed, registry._fallback)  # the changed files' entry


def test_the_folder_is_bounded(cache, monkeypatch):
    """Beyond MAX_ENTRIES entries of a kind, the least recently written go, down to three quarters of the bound;
    an entry larger than MAX_ENTRY_BYTES is not written."""
    monkeypatch.setattr(diskcache, "MAX_ENTRIES", 8)
    monkeypatch.setattr(diskcache, "PRUNE_EVERY", 1)  # the folder looked over at every write
    for k in range(9):
        assert diskcache.put("datafiles", b"key %d" % k, {"k": k})
        if k < 8:  # written k seconds after the epoch: the order of writing, whatever the clock's resolution
            os.utime(cache / "datafiles" / diskcache._digest("datafiles", b"key %d" % k), ns=(k * 10**9, k * 10**9))
    # the ninth write found 9 > 8 entries and kept the newest 8 * 3 // 4 = 6: keys 3..8
    assert len(_entries(cache, "datafiles")) == 6
    assert [k for k in range(9) if diskcache.get("datafiles", b"key %d" % k) is not None] == [3, 4, 5, 6, 7, 8]
    monkeypatch.setattr(diskcache, "MAX_ENTRY_BYTES", 100)
    assert not diskcache.put("datafiles", b"big", "x" * 200)
    assert diskcache.get("datafiles", b"big") is None


def test_the_folder_is_bounded_in_bytes(cache, monkeypatch):
    """Beyond MAX_KIND_BYTES bytes of a kind (entries of other code's keys that no one reads again, say), the
    least recently written go down to three quarters of the bound; the first write of a process looks."""
    monkeypatch.setattr(diskcache, "_WRITES", {})
    for k in range(6):  # 16 bytes of checksum + marshal's 5-byte header + 1,000 bytes each: 1,021 bytes
        assert diskcache.put("expressions", b"key %d" % k, "x" * 1000)
        os.utime(cache / "expressions" / diskcache._digest("expressions", b"key %d" % k), ns=(k * 10**9, k * 10**9))
    assert len(_entries(cache, "expressions")) == 6
    monkeypatch.setattr(diskcache, "MAX_KIND_BYTES", 4000)
    monkeypatch.setattr(diskcache, "_WRITES", {})  # a new process
    assert diskcache.put("expressions", b"key 6", "x" * 1000)
    # 7 x 1,021 = 7,147 bytes > 4,000: the oldest go until at most 3,000 bytes are left, the newest 2 entries
    assert [k for k in range(7) if diskcache.get("expressions", b"key %d" % k) is not None] == [5, 6]
