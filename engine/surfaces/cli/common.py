"""What the commands share: the request their arguments make (read by :mod:`vramwise.surfaces.request`,
as the server's are), the recipe's lines, the note that names the other profile, and the optional plot."""

from __future__ import annotations

from vramwise.estimation.estimate import Estimate
from vramwise.surfaces.request import Request, read_flags, read_flags_launch, read_flags_recipe
from vramwise.surfaces.cli.format import gib


def request_of(args) -> Request:
    """The :class:`~vramwise.surfaces.request.Request` of the parsed arguments (read once per command)."""
    req = getattr(args, "_request", None)
    if req is None:
        req = args._request = read_flags(args)
    return req


def recipe_of(args):
    """The :class:`~vramwise.Recipe` of ``--recipe`` (read once per command), or None without one."""
    return read_flags_recipe(args)


def run_estimate(args) -> Estimate:
    """The estimate the arguments describe (a recipe's run with --recipe)."""
    return request_of(args).estimate()


def recipe_lines(recipe, everything: bool = False, lora_targets: tuple | None = None) -> list[str]:
    """What a recipe gave: its parts, each setting it set (with file:line and key; ``everything``: the
    defaults too, with theirs; a value as :meth:`~vramwise.Recipe.shown` words it, ``lora_targets`` being
    the modules the estimate adapts) and its warnings."""
    if recipe is None:
        return []
    from vramwise.estimation.recipe import Origin

    # a part named by its format already (a framework's shipped config) is not prefixed twice
    parts = ", ".join(path if path and path.startswith(f"{fmt} ") else f"{fmt} {path}" if path else fmt
                      for fmt, path in recipe.parts)
    basis = f", as its keys tell: {'; '.join(recipe.release_basis)}" if recipe.release_basis else ""
    lines = [f"recipe: {parts} ({recipe.framework} {recipe.framework_version}{basis}; profile {recipe.profile}, "
             f"{recipe.origins.get('profile', Origin('vramwise default')).describe()})"]
    shown = [(n, recipe.shown(n, lora_targets)) for n in recipe.settings
             if everything or recipe.origins[n].kind != "vramwise default"]
    shown += [(n, recipe.shown(n)) for n in recipe.extras]
    if "model" in recipe.origins:
        model = recipe.model if isinstance(recipe.model, str) else "(a config mapping)"
        shown.insert(0, ("model", recipe.origins["model"].shown(model)))
    width = max((len(n) for n, _ in shown), default=0)
    for name, text in shown:
        lines.append(f"  {name:<{width}}  {text:<24} {recipe.origins[name].describe()}")
    lines += [f"  warning: {w}" for w in recipe.warnings]
    return lines


def launch_lines(launch) -> list[str]:
    """What a launch line gave: its program, each figure (or "not stated") with the words it came from, the
    files it names and its notes."""
    if launch is None:
        return []
    runs = f", running {launch.runs}" if launch.runs else ""
    lines = [f"launch line: {launch.program}{runs}"]
    figures = (("processes per node", launch.processes_per_node, "processes_per_node"),
               ("nodes", launch.nodes, "nodes"), ("world size", launch.world_size, "world_size"),
               ("strategy", launch.strategy, "strategy"), ("profile", launch.profile, "profile"))
    for name, value, key in figures:
        shown = "not stated" if value is None else str(value)
        lines.append(f"  {name:<18}  {shown:<12} {launch.sources.get(key, '')}".rstrip())
    lines += [f"  file: {role} {path}" for role, path in launch.files]
    lines += [f"  note: {n}" for n in launch.notes]
    return lines


def show_recipe(args, out, everything: bool = False, estimate: Estimate | None = None) -> None:
    """Write the launch line's lines and the recipe's (nothing without --launch or --recipe); given the
    ``estimate`` of the recipe, its target keywords are shown with the modules it adapts."""
    targets = estimate.lora_targets if estimate is not None else None
    for line in launch_lines(read_flags_launch(args)) + recipe_lines(recipe_of(args), everything, targets):
        out.write(line + "\n")


def with_recipe(args, data: dict, estimate: Estimate | None = None) -> dict:
    """A command's JSON with the recipe it read under "recipe" and the launch line under "launch" (unchanged
    without --recipe or --launch); given the recipe's ``estimate``, as :func:`show_recipe`."""
    recipe, launch = recipe_of(args), read_flags_launch(args)
    if recipe is not None:
        data = {**data, "recipe": recipe.to_dict(estimate.lora_targets if estimate is not None else None)}
    return data if launch is None else {**data, "launch": launch.to_dict()}


def note_line(note) -> str | None:
    """The one line of an :class:`~vramwise.answers.profile_note.OtherProfile` (None without one)."""
    if note is None:
        return None
    bigger = f"{note.ratio:.1f}x" if note.ratio > 1 else f"1/{1 / note.ratio:.1f} of"
    return (f"note: profile {note.profile} ({note.summary}) gives {gib(note.total)} GiB at the same settings, "
            f"{bigger} this figure; the two profiles model different training stacks (--profile {note.profile})")


def plot(kind: str, obj, path: str | None, err) -> None:
    """Draw ``obj`` (an estimate, fit, comparison or sweep, as ``kind`` says) to ``path`` when --plot gave
    one; matplotlib is imported only then."""
    if not path:
        return
    from vramwise.answers import plots

    draw = {"estimate": plots.plot_estimate, "fit": plots.plot_fit, "compare": plots.plot_compare,
            "sweep": plots.plot_sweep}[kind]
    draw(obj, path)
    err.write(f"wrote {path}\n")
