"""``vramwise serve``: start the web page and JSON API of :mod:`vramwise.surfaces.serve`."""

from __future__ import annotations

import sys

from vramwise.surfaces.cli.parser import BadValue


def run(args, out) -> int:
    from vramwise.surfaces.serve import serve

    if not 0 <= args.port <= 65535:
        raise BadValue(f"--port must be from 0 to 65,535, got {args.port}")
    return serve(host=args.host, port=args.port, open_browser=args.open, err=sys.stderr)
