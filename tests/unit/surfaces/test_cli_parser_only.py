"""The command line builds the parser of the command named first alone (vramwise.surfaces.cli.parser.build_parser's
``only``): its help, its parse and its errors are those of the full parser's command, and anything else (no
command, an unknown one, a top-level flag) still meets the full parser."""

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from vramwise.surfaces.cli.main import COMMANDS, main
from vramwise.surfaces.cli.parser import CommandLineError, build_parser


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_commands_parser_alone_is_the_full_parsers(command):
    full, alone = build_parser(), build_parser(only=command)
    assert alone.subparser(command).format_help() == full.subparser(command).format_help()
    assert alone.subparser(command).prog == full.subparser(command).prog == f"vramwise {command}"
    # the other commands are not built
    assert [c for c in COMMANDS if alone.subparser(c) is not alone] == [command]


@pytest.mark.parametrize("argv", [
    ["estimate", "examples/llama-3.1-8b.json", "--method", "lora", "--batch-size", "8"],
    ["fit", "examples/llama-3.1-8b.json", "--gpu", "RTX 4090", "--headroom", "10%"],
    ["sweep", "examples/llama-3.1-8b.json", "--batch-size", "1,2", "--format", "csv"],
    ["compare", "examples/llama-3.1-8b.json", "--methods", "qlora,lora"],
    ["check", "families/llama.yaml", "-q"],
])
def test_the_same_parse(argv):
    assert vars(build_parser(only=argv[0]).parse_args(argv)) == vars(build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", [
    ["estimate", "--batch-size", "x"],
    ["estimate", "examples/llama-3.1-8b.json", "--methd", "lora"],
    ["fit", "examples/llama-3.1-8b.json"],
    ["compare", "examples/llama-3.1-8b.json", "--method", "lora"],
])
def test_the_same_errors(argv):
    def error(parser):
        with pytest.raises(CommandLineError) as e:
            args, extra = parser.parse_known_args(argv)
            if extra:
                parser.subparser(argv[0]).error(f"unrecognized arguments: {' '.join(extra)}")
        return str(e.value), e.value.prog

    assert error(build_parser(only=argv[0])) == error(build_parser())


def _run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_without_a_command_first_the_full_parser_answers():
    code, out, _ = _run(["--help"])
    assert code == 0 and all(c in out for c in COMMANDS)  # every command listed in the top-level help
    code, _, err = _run(["nope"])
    assert code == 2 and "invalid choice: 'nope'" in err and all(repr(c) in err for c in COMMANDS)
    code, _, err = _run([])
    assert code == 2 and "the following arguments are required: COMMAND" in err
