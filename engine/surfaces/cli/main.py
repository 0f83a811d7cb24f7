"""Command line: ``vramwise estimate|explain|fit|compare|sweep|families|catalog|measure|gpus|select|check|serve|runs``.

This module runs a command and turns every failure into an exit code; the flags are in
:mod:`~vramwise.surfaces.cli.parser`, each command in a module of its own (``estimate``, ``explain``,
``fit``, ``compare``, ``sweep``, ``data`` for families/catalog/check, ``gpus`` for gpus/select,
``measure``, ``serve``, ``runs``), the formatting in :mod:`~vramwise.surfaces.cli.format`. Numbers are computed
by the library in bytes; the command line only formats them (GiB = 2**30 bytes). Exit codes:

- 0: a real answer was printed (``check``: every file is fine);
- 1: ``check`` found problems in the files it was given;
- 2: bad input (argument, file, config, setting): one line ``vramwise: error: ...``, and
  for a bad argument a second line naming ``--help``;
- 70: an internal error (a bug): one line naming the exception; ``VRAMWISE_DEBUG=1``
  re-raises it with its traceback;
- 130: interrupted.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

from vramwise.errors import InternalError, VramwiseError
from vramwise.rules.classcode import compiled_methods

with compiled_methods():  # the data classes' generated methods from the disk cache (vramwise.rules.classcode)
    from vramwise.surfaces.cli.format import one_line
    from vramwise.surfaces.cli.parser import BadValue, CommandLineError, build_parser

__all__ = ["main", "build_parser", "EXIT_INTERNAL", "EXIT_USAGE"]

#: exit code of an unexpected exception (sysexits' EX_SOFTWARE): a bug, never bad input
EXIT_INTERNAL = 70
EXIT_USAGE = 2

# Each command's function: (parsed arguments, output) -> exit code. A command's module is imported when
# the command runs, so `vramwise estimate` loads neither the answers nor the server.


def _estimate(args, out):
    from vramwise.surfaces.cli import estimate
    return estimate.run(args, out)


def _explain(args, out):
    from vramwise.surfaces.cli import explain
    return explain.run(args, out)


def _fit(args, out):
    from vramwise.surfaces.cli import fit
    return fit.run(args, out)


def _compare(args, out):
    from vramwise.surfaces.cli import compare
    return compare.run(args, out)


def _sweep(args, out):
    from vramwise.surfaces.cli import sweep
    return sweep.run(args, out)


def _families(args, out):
    from vramwise.surfaces.cli import data
    return data.families(args, out)


def _catalog(args, out):
    from vramwise.surfaces.cli import data
    return data.catalog(args, out)


def _check(args, out):
    from vramwise.surfaces.cli import data
    return data.check(args, out)


def _measure(args, out):
    from vramwise.surfaces.cli import measure
    return measure.run(args, out)


def _gpus(args, out):
    from vramwise.surfaces.cli import gpus
    return gpus.gpus(args, out)


def _select(args, out):
    from vramwise.surfaces.cli import gpus
    return gpus.select(args, out)


def _runs(args, out):
    from vramwise.surfaces.cli import runs
    return runs.run(args, out)


def _serve(args, out):
    from vramwise.surfaces.cli import serve
    return serve.run(args, out)


COMMANDS: dict[str, Callable] = {
    "estimate": _estimate, "explain": _explain, "fit": _fit, "compare": _compare, "sweep": _sweep,
    "families": _families, "catalog": _catalog, "check": _check, "measure": _measure,
    "gpus": _gpus, "select": _select, "serve": _serve, "runs": _runs,
}


#: Commands that run without :func:`~vramwise.rules.classcode.compiled_methods`: they import other libraries'
#: data classes (torch, transformers) or serve for hours, and the table is for vramwise's own.
_UNCACHED = frozenset({"measure", "serve"})


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module's docstring). Never raises."""
    try:
        return _main(argv)
    except CommandLineError as e:
        sys.stderr.write(f"vramwise: error: {one_line(e)}\n")
        sys.stderr.write(f"run '{e.prog} --help' for usage\n")
        return EXIT_USAGE
    except SystemExit as e:  # --help and --version print and exit 0
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    except InternalError as e:
        sys.stderr.write(f"vramwise: internal error: {type(e).__name__}: {one_line(e)[:2000]}\n")
        return EXIT_INTERNAL
    except VramwiseError as e:
        problems = getattr(e, "problems", None)
        msg = "\n".join(problems) if problems else one_line(e)
        sys.stderr.write(f"vramwise: error: {msg}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:  # pragma: no cover
        return 130
    except BrokenPipeError:  # output piped into head and closed early
        try:  # Python's advice: point stdout at devnull so the final flush does not fail again
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except Exception:  # noqa: BLE001 - a captured stdout has no descriptor: nothing to quiet
            pass
        return 0
    except Exception as e:  # noqa: BLE001 - the boundary: a bug is reported in one line, never hidden
        if os.environ.get("VRAMWISE_DEBUG"):
            raise
        sys.stderr.write(
            f"vramwise: internal error: {type(e).__name__}: {one_line(e)[:500]} "
            f"(a bug; please report it; VRAMWISE_DEBUG=1 shows the traceback)\n"
        )
        return EXIT_INTERNAL


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    # a command named first: the parser of that command alone (the same parse, errors and --help of it)
    parser = build_parser(only=words[0] if words and words[0] in COMMANDS else None)
    args, extra = parser.parse_known_args(words)
    cmd = args.command
    if extra:  # refused by the command's own parser, which names its closest flags
        parser.subparser(cmd).error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if cmd in _UNCACHED:
            return COMMANDS[cmd](args, sys.stdout)
        with compiled_methods():
            return COMMANDS[cmd](args, sys.stdout)
    except BadValue as e:
        raise CommandLineError(str(e), f"vramwise {cmd}") from None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
