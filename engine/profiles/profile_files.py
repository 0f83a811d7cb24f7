"""A profile's folder: its ``profile.yaml`` manifest and the formula files it lists.

A manifest lists its own files by name, and a file of another folder of the formulas root as
``FOLDER/FILE.yaml``: ``shared/FILE.yaml`` for the files several profiles share, or
``PROFILE/FILE.yaml`` for a file of another profile used unchanged. Every file of the profile's
own folder must be listed.
"""

from __future__ import annotations

from typing import Any

from vramwise.rules.datafiles import DataFile, load_data_file, read_folder
from vramwise.errors import FileFormatError

__all__ = ["read_profile"]


def read_profile(formulas: Any, display: str | None, name: str, validate: bool) -> tuple[DataFile, list[DataFile]]:
    """(the manifest, the formula files in the order listed) of profile ``name`` in the formulas root
    ``formulas`` (shown as ``display``, else by its path). Raises :class:`FileFormatError` with every
    problem found."""
    folder = formulas.joinpath(name)
    disp = f"{display}/{name}" if display else None
    texts = dict(read_folder(folder, disp))
    manifest_path = f"{disp}/profile.yaml" if disp else str(folder.joinpath("profile.yaml"))
    manifest = load_data_file(texts.pop(manifest_path), manifest_path, "profile-1.schema.json", validate=validate)
    texts.pop(f"{disp}/cases.yaml" if disp else str(folder.joinpath("cases.yaml")), None)  # test cases (tooling.cases)
    files = []
    problems = []
    listed = manifest.data["files"]
    shared: dict[str, dict] = {}  # other folder -> {file name: (shown path, text)}
    for k, fname in enumerate(listed):
        if "/" in fname:  # a file of another folder of the formulas root (formulas/shared, or a profile's)
            other, leaf = fname.split("/", 1)
            if other == name or not formulas.joinpath(other).is_dir():
                problems.append(manifest.problem(("files", k), f"listed file {fname!r}: {other!r} is not another "
                                                               "profile nor a folder of shared formula files"))
                continue
            if other not in shared:
                sdisp = f"{display}/{other}" if display else None
                shared[other] = {p.rsplit("/", 1)[-1]: (p, t) for p, t in read_folder(formulas.joinpath(other), sdisp)}
            if leaf not in shared[other] or leaf in ("profile.yaml", "strategies.yaml"):
                problems.append(manifest.problem(("files", k), f"listed file {fname!r} does not exist"))
                continue
            shown, text = shared[other][leaf]
            try:
                files.append(load_data_file(text, shown, "formulas-1.schema.json", validate=validate))
            except FileFormatError as e:
                problems.extend(e.problems)
            continue
        shown = f"{disp}/{fname}" if disp else str(folder.joinpath(fname))
        if shown not in texts:
            problems.append(manifest.problem(("files", k), f"listed file {fname!r} does not exist"))
            continue
        try:
            files.append(load_data_file(texts[shown], shown, "formulas-1.schema.json", validate=validate))
        except FileFormatError as e:
            problems.extend(e.problems)
    unlisted = [p for p in texts if p.rsplit("/", 1)[-1] not in listed]  # (own files only)
    if unlisted:
        problems.append(manifest.problem(("files",), f"files not listed: {', '.join(unlisted)}"))
    if manifest.data["profile"] != name:
        problems.append(manifest.problem(("profile",), f"profile name {manifest.data['profile']!r} differs from its folder {name!r}"))
    if problems:
        raise FileFormatError(problems)
    return manifest, files
