"""vramwise.rules.classcode: data classes defined under compiled_methods take their generated methods' code from the
disk cache, and are the classes dataclasses makes without it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap

import pytest

from vramwise.rules import classcode, diskcache

#: A module defining frozen records as vramwise's are written (defaults, a factory, a field outside eq and repr).
SOURCE = textwrap.dedent('''
    from __future__ import annotations
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Point:
        """A record."""
        x: int
        y: int = 2
        tags: tuple = ()
        extra: dict = field(default_factory=dict, repr=False, compare=False)

    @dataclass
    class Box:
        """A mutable one."""
        corner: Point
        size: float = 1.5
''')


def _define() -> dict:
    ns: dict = {"__name__": "classcode_test_module"}
    sys.modules["classcode_test_module"] = type(sys)("classcode_test_module")  # dataclasses reads the module
    try:
        exec(compile(SOURCE, "<classcode test>", "exec"), ns)  # noqa: S102 - the test's own source
    finally:
        del sys.modules["classcode_test_module"]
    return ns


def _behaviour(ns: dict) -> list:
    """What the generated methods do, observed."""
    Point, Box = ns["Point"], ns["Box"]
    p, q = Point(1), Point(1, extra={"a": 1})
    out = [repr(p), p == q, hash(p) == hash(q), p != Point(1, 3), repr(Box(p)), Box(p) == Box(Point(1)),
           [f.name for f in dataclasses.fields(Point)], Point.__doc__, Box.__init__.__defaults__]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 5
    with pytest.raises(TypeError):
        Point()  # x has no default
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", str(tmp_path / "cache"))
    classcode.clear()
    yield tmp_path / "cache"
    classcode.clear()


def _count_compiles(monkeypatch) -> list:
    """Each source classcode compiles itself (a miss in the stored table)."""
    seen: list = []
    real = compile

    def counting(source, *args, **kwargs):
        seen.append(source)
        return real(source, *args, **kwargs)

    monkeypatch.setitem(classcode.__dict__, "compile", counting)
    return seen


def test_the_classes_are_those_dataclasses_makes_and_the_second_definition_compiles_nothing(cache, monkeypatch):
    plain = _behaviour(_define())
    compiled = _count_compiles(monkeypatch)
    with classcode.compiled_methods():
        assert dataclasses.exec is classcode._exec  # noqa: S102 - the name dataclasses' generator calls
        cold = _behaviour(_define())
    assert not hasattr(dataclasses, "exec")  # put back as it was
    # Python 3.11 compiles one source per method: Point's __init__, __repr__, __eq__, __hash__, __setattr__,
    # __delattr__ and Box's __init__, __repr__, __eq__ (a later Python may generate them in fewer sources)
    assert 1 <= len(compiled) <= 9 and all("def " in source for source in compiled)
    assert len(list((cache / "dataclass-code").iterdir())) == 1
    classcode.clear()  # a new process: the table is read from the disk
    compiled.clear()
    with classcode.compiled_methods():
        warm = _behaviour(_define())
    assert compiled == []
    assert plain == cold == warm


def test_nested_uses_patch_once_and_put_back_at_the_outermost(cache):
    with classcode.compiled_methods():
        with classcode.compiled_methods():
            _define()
        assert dataclasses.exec is classcode._exec  # noqa: S102
    assert not hasattr(dataclasses, "exec")


def test_with_the_cache_off_nothing_is_patched_or_written(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMWISE_CACHE_DIR", "off")
    classcode.clear()
    with classcode.compiled_methods():
        assert not hasattr(dataclasses, "exec")
        assert _behaviour(_define()) == _behaviour(_define())
    assert diskcache.cache_dir() is None


def test_a_corrupt_table_is_ignored(cache):
    with classcode.compiled_methods():
        expected = _behaviour(_define())
    (entry,) = (cache / "dataclass-code").iterdir()
    entry.write_bytes(b"\x00 not an entry")
    classcode.clear()
    with classcode.compiled_methods():
        assert _behaviour(_define()) == expected


def test_an_exception_inside_puts_dataclasses_back(cache):
    with pytest.raises(RuntimeError):
        with classcode.compiled_methods():
            raise RuntimeError("inside")
    assert not hasattr(dataclasses, "exec")


def test_importing_vramwise_leaves_dataclasses_as_it_was():
    code = "import dataclasses, vramwise, vramwise.surfaces.cli.main; print(hasattr(dataclasses, 'exec'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
