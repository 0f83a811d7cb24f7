"""The command outputs shown in README.md and docs/*.md, and the module map of docs/architecture.md,
are what scripts/build_doc_outputs.py generates now: a changed figure fails until the pages are
regenerated (``python scripts/build_doc_outputs.py``).

Besides the check of the real pages, small pages written here pin the mechanism: which blocks are
console blocks, how a marker selects output lines, that a stale line is named, and that a wrong layer
in the diagram is caught.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import script_module

REPO = Path(__file__).resolve().parents[3]

# what `vramwise gpus` prints under the script's normalisation (NVML as without NVIDIA's driver, the
# other backends as on Linux x86_64 without their tools): engine/gpus/discovery.py's "NVML could not
# start" reason with pynvml's NVMLError_LibraryNotFound text, then each backend's "found none" line
# (engine/gpus/backends.py) and the CPU line of engine/surfaces/cli/gpus.py
NO_NVIDIA = ("no NVIDIA GPU visible: NVML could not start "
             "(NVMLError_LibraryNotFound: NVML Shared Library Not Found)")
NO_GPU = "\n".join([
    NO_NVIDIA,
    "no AMD GPU found: the amdsmi library is not installed; amd-smi not found; rocm-smi not found",
    "no Intel GPU found: torch is not loaded (torch.xpu is read only where it is); xpu-smi not found",
    "no Apple GPU: not macOS on Apple Silicon (Linux x86_64)",
    "no Vulkan GPU found: vulkaninfo not found",
    "no GPU found: a run here uses the CPU",
])


def _script():
    return script_module("scripts/build_doc_outputs.py", "build_doc_outputs")


def _report(stale, errors) -> str:
    lines = [f"error: {e}" for e in errors] + [f"stale: {s}" for s in stale]
    return "\n".join([*lines, f"regenerate with: {_script().REGENERATE}"])


PAGES = _script().doc_files()


def _has_blocks(page: Path) -> bool:
    """Whether a page has a console block (a fenced block whose first line is `$ vramwise ...`); a page
    whose blocks cannot be read is tested too, so that its test names the problem."""
    try:
        return bool(_script().find_blocks(page, page.read_text(encoding="utf-8").split("\n")))
    except _script().BlockError:
        return True


WITH_BLOCKS = [p for p in PAGES if _has_blocks(p)]


# one test a page, so that the workers of the default suite share the pages (`vramwise check` and
# `vramwise families` compile every family and take most of the time)
@pytest.mark.parametrize("page", WITH_BLOCKS, ids=[str(p.relative_to(REPO)) for p in WITH_BLOCKS])
def test_console_blocks_are_current(page):
    stale, errors = _script().process([page], write=False)
    assert not stale and not errors, _report(stale, errors)


def test_few_blocks_are_not_run():
    # `not run` is for output that differs on every machine (today: the runs database of `vramwise runs`);
    # a command that needs the network or a GPU belongs in the pages only as an exception
    b = _script()
    skipped = [f"{p.relative_to(REPO)}:{blk.start + 1}: {blk.skip}"
               for p in PAGES for blk in b.find_blocks(p, p.read_text(encoding="utf-8").split("\n")) if blk.skip]
    assert len(skipped) <= 2, "\n".join(skipped)
    assert all(": not run: " in s for s in skipped), skipped


def test_module_map_and_layers_are_current():
    b = _script()
    stale, errors = b.process_module_map(write=False)
    assert not stale and not errors, _report(stale, errors)


def test_select_shows_ranges_with_elisions():
    b = _script()
    out = ["a", "b", "total: 1", "c", "advice: x", "  1. y", "  2. z"]
    # whole output without a spec
    assert b.select(out, "") == out
    # 1..2: lines 1 and 2, then one "..." for the five lines left out
    assert b.select(out, "1..2") == ["a", "b", "..."]
    # /^total/ alone: one line, "..." before (lines 1-2) and after (lines 4-7)
    assert b.select(out, "/^total/") == ["...", "total: 1", "..."]
    # from advice to the end, after a gap of lines 1-4
    assert b.select(out, "/^advice:/..") == ["...", "advice: x", "  1. y", "  2. z"]
    # offsets: the line before "  2." ends the range; line 7 is left out
    assert b.select(out, r"/^advice:/../^  2\./-1") == ["...", "advice: x", "  1. y", "..."]
    # two ranges: the gap between them (lines 3-4) is one "..."
    assert b.select(out, "1..2, /^advice/") == ["a", "b", "...", "advice: x", "..."]
    # a comma inside a regex belongs to the regex
    assert b.select(["x, y", "z"], "/x, y/") == ["x, y", "..."]


@pytest.mark.parametrize("spec, message", [
    ("/^nothing/", "matches"),
    ("9", "outside"),
    ("3..1", "backwards"),
    ("foo", "bad item"),
])
def test_bad_specs_are_named(spec, message):
    b = _script()
    with pytest.raises(b.BlockError, match=message):
        b.select(["a", "b", "c"], spec)


def _page(tmp_path: Path, text: str) -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    page = tmp_path / "docs" / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_stale_block_is_named_and_rewritten(tmp_path):
    b = _script()
    page = _page(tmp_path, "# Page\n\n```\n$ vramwise gpus\nno GPU here\n```\n")
    stale, errors = b.process([page], root=tmp_path, write=False)
    assert errors == []
    # the block's first command is line 4; the first differing output line is line 5
    assert [s.where for s in stale] == ["docs/page.md:4"]
    assert stale[0].first_difference == f"line 5: the page shows 'no GPU here', the command prints {NO_NVIDIA!r}"
    assert page.read_text(encoding="utf-8").count("no GPU here") == 1  # --check writes nothing
    b.process([page], root=tmp_path, write=True)
    assert page.read_text(encoding="utf-8") == f"# Page\n\n```\n$ vramwise gpus\n{NO_GPU}\n```\n"
    assert b.process([page], root=tmp_path, write=False) == ([], [])


def test_markers_skip_select_and_expect_an_exit_status(tmp_path):
    b = _script()
    text = ("<!-- vramwise-output: not run: a local database -->\n\n```\n$ vramwise runs\nanything\n```\n\n"
            "<!-- vramwise-output: exit=2 -->\n\n```\n$ vramwise estimate --batch-size x\n```\n\n"
            "<!-- vramwise-output: /NVML/; 1 -->\n\n```\n$ vramwise gpus\n$ vramwise gpus\n```\n")
    page = _page(tmp_path, text)
    assert b.process([page], root=tmp_path, write=True)[1] == []
    got = page.read_text(encoding="utf-8").split("\n")
    # the skipped block is untouched; the usage error's two lines (stderr) are shown; of the `gpus`
    # output, /NVML/ shows its first line and "..." for the rest, the second spec (1) the same
    assert got[3:5] == ["$ vramwise runs", "anything"]
    assert got[10:13] == ["$ vramwise estimate --batch-size x",
                          "vramwise: error: argument --batch-size: invalid int value: 'x'",
                          "run 'vramwise estimate --help' for usage"]
    assert got[18:24] == ["$ vramwise gpus", NO_NVIDIA, "...", "$ vramwise gpus", NO_NVIDIA, "..."]


def test_an_indented_console_block_is_refused(tmp_path):
    b = _script()
    page = _page(tmp_path, "- item\n\n    ```\n    $ vramwise gpus\n    ```\n")
    stale, errors = b.process([page], root=tmp_path, write=False)
    assert stale == [] and len(errors) == 1 and errors[0].startswith("docs/page.md:4: an indented console block")


def test_an_unexpected_exit_status_is_an_error(tmp_path):
    b = _script()
    page = _page(tmp_path, "```\n$ vramwise estimate --batch-size x\n```\n")
    stale, errors = b.process([page], root=tmp_path, write=True)
    assert len(errors) == 1
    assert errors[0].startswith("docs/page.md:2: `vramwise estimate --batch-size x` exited with status 2, not 0")
    assert page.read_text(encoding="utf-8") == "```\n$ vramwise estimate --batch-size x\n```\n"


def test_a_benchmark_script_block_runs_its_main(tmp_path):
    # `$ python benchmarks/NAME.py ARGS` runs the script's main(ARGS) in this process; its return value is the
    # exit status, and an argparse error (SystemExit 2) is one too
    b = _script()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "echo.py").write_text(
        "import sys\n\ndef main(argv=None):\n    print('args:', *argv)\n    if argv == ['bad']:\n"
        "        raise SystemExit(2)\n    return 0\n", encoding="utf-8")
    page = _page(tmp_path, "```\n$ python benchmarks/echo.py a b\nold\n```\n\n"
                           "<!-- vramwise-output: exit=2 -->\n\n```\n$ python benchmarks/echo.py bad\n```\n")
    stale, errors = b.process([page], root=tmp_path, write=True)
    assert errors == [] and [s.where for s in stale] == ["docs/page.md:2", "docs/page.md:9"]
    assert page.read_text(encoding="utf-8") == ("```\n$ python benchmarks/echo.py a b\nargs: a b\n```\n\n"
                                                "<!-- vramwise-output: exit=2 -->\n\n"
                                                "```\n$ python benchmarks/echo.py bad\nargs: bad\n```\n")
    # only scripts of benchmarks/ are run
    with pytest.raises(b.BlockError, match="not a vramwise command"):
        b.run_command("python scripts/build_doc_outputs.py")


def test_a_pipe_feeds_the_next_program(tmp_path):
    if shutil.which("grep") is None:
        pytest.skip("no grep")
    b = _script()
    status, out = b.run_command("vramwise gpus | grep -o 'NVML could not start'")
    assert (status, out) == (0, "NVML could not start\n")


def test_a_layer_drawn_in_the_wrong_place_is_caught(tmp_path):
    b = _script()
    lines = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").split("\n")
    assert b.layer_problems(lines) == []
    k = next(k for k, ln in enumerate(lines) if ln.startswith(" 7 vramwise.gpus"))
    lines[k] = lines[k].replace(" 7 vramwise.gpus", " 6 vramwise.gpus", 1)
    problems = b.layer_problems(lines)
    assert problems == [f"docs/architecture.md:{k + 1}: vramwise.gpus is drawn in layer 6, RANKS puts it in 7"]


def test_first_sentence_reads_markup():
    b = _script()
    assert b.first_sentence("``vramwise x|y``: one. Two.") == "`vramwise x/y`: one."
    assert b.first_sentence("See :mod:`~vramwise.a.b` and :class:`C <vramwise.c.C>`.\n\nMore.") == "See `b` and `C`."
    assert b.first_sentence(None) == "—"
