"""Runtime presets: a runtime that starts a profile's stack with defaults and names of its own (Ollama runs
llama.cpp's llama-server), as data (``formulas/<preset>.yaml``, schema ``preset-1``).

A preset's options are the runtime's own (``num_ctx``, ``num_parallel``, ...), each with its default, the
environment variable and the config-file parameter that set it (a Modelfile's ``PARAMETER`` lines); its
``derived`` values and its ``settings`` (the profile's, such as llama.cpp's ``n_ctx``) are expressions over
the options, compiled by the one evaluator. :func:`preset_settings` gives the settings with the origin of
each: the Modelfile's line, the environment variable, or the runtime's default. Nothing here knows a runtime
by name.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from vramwise.errors import FileFormatError, SettingsError

__all__ = ["Preset", "PresetOption", "PresetSettings", "Modelfile", "preset", "PRESETS", "read_modelfile", "read_environment",
           "preset_settings", "compile_preset"]

SCHEMA = "preset-1.schema.json"
#: The presets shipped in formulas/ (the file formulas/<name>.yaml each).
PRESETS = ("ollama",)
#: Names a preset's expressions read besides its options and derived values.
CONTEXT_NAMES = ("ctx_train", "gpu_total")
#: The most bytes of a Modelfile read.
MAX_MODELFILE_BYTES = 1 << 20


@dataclass(frozen=True)
class PresetOption:
    """One of the runtime's options: its name, type, default, and what sets it."""

    name: str
    type: str  # "int" or "text"
    default: Any
    environment: str | None
    modelfile: str | None
    values: Mapping[str, str] | None
    otherwise: str | None
    lower: bool
    description: str
    source: str


@dataclass(frozen=True)
class Preset:
    """A loaded preset: its options, and its derived values, settings and answers compiled."""

    name: str
    profile: str
    summary: str
    release: str
    source: str
    file: str
    options: tuple  # of PresetOption
    derived: tuple  # ((name, Expression, source), ...) in file order
    settings: tuple  # ((setting, Expression, source), ...)
    answers: tuple  # ((option, Expression), ...): an option's value from the profile's settings

    def option(self, name: str) -> PresetOption:
        return next(o for o in self.options if o.name == name)


@dataclass(frozen=True)
class Modelfile:
    """The lines of an Ollama Modelfile that vramwise reads: ``FROM`` and each ``PARAMETER`` (name, value, line)."""

    path: str
    model: str | None  # FROM's argument
    parameters: tuple  # ((name, value as written, line), ...), the last of a repeated name winning where read


@dataclass(frozen=True)
class PresetSettings:
    """What a preset gives: the profile's settings and, per setting and per option, where the value comes from."""

    preset: str
    profile: str
    settings: Mapping[str, Any]  # the profile's settings (llama.cpp's names)
    origins: Mapping[str, str]  # setting -> where its value comes from, in words
    options: tuple  # ((option, value, origin), ...): the runtime's own names
    derived: Mapping[str, Any]  # the derived values (the context per request, ...)

    def to_dict(self) -> dict:
        return {"preset": self.preset, "profile": self.profile, "settings": dict(self.settings),
                "origins": dict(self.origins), "derived": dict(self.derived),
                "options": [{"name": n, "value": v, "origin": o} for n, v, o in self.options]}


def compile_preset(df) -> Preset:
    """A loaded preset file compiled: each expression checked against the names it may read (the options, the
    derived values above it, ctx_train and gpu_total; the answers read the profile's settings), a problem
    naming the file, line and node."""
    from vramwise.rules.expr.language import compile_expression

    data = df.data
    options = tuple(PresetOption(name, o["type"], o["default"], o.get("environment"), o.get("modelfile"),
                                 o.get("values"), o.get("otherwise"), bool(o.get("lower", False)), o["description"],
                                 o["source"]) for name, o in data["options"].items())
    known = {o.name for o in options} | set(CONTEXT_NAMES)
    derived = []
    for name, rule in data.get("derived", {}).items():
        derived.append((name, compile_expression(rule["expr"], allowed=frozenset(known), df=df,
                                                 parts=("derived", name, "expr")), rule["source"]))
        known.add(name)
    settings = tuple((name, compile_expression(rule["expr"], allowed=frozenset(known), df=df,
                                               parts=("settings", name, "expr")), rule["source"])
                     for name, rule in data["settings"].items())
    given = frozenset(data["settings"])
    answers = tuple((name, compile_expression(expr, allowed=given, df=df, parts=("answers", name)))
                    for name, expr in data.get("answers", {}).items())
    problems = [f"{df.key_where(('answers', name))}: $.answers.{name}: {name!r} is not an option"
                for name in data.get("answers", {}) if name not in {o.name for o in options}]
    if problems:
        raise FileFormatError(problems)
    return Preset(data["preset"], data["profile"], data["summary"], data["release"], data["source"], df.path,
                  options, tuple(derived), settings, answers)


@lru_cache(maxsize=None)
def preset(name: str) -> Preset:
    """The shipped preset ``name`` (formulas/<name>.yaml), read and compiled once."""
    from vramwise.rules.datafiles import load_data_file, package_files, read_data_text

    if name not in PRESETS:
        raise SettingsError(f"unknown preset {name!r} (choose from: {', '.join(PRESETS)})")
    shown = f"formulas/{name}.yaml"
    item = package_files("vramwise.formulas").joinpath(f"{name}.yaml")
    return compile_preset(load_data_file(read_data_text(item, shown), shown, SCHEMA, validate=False))


_COMMAND = re.compile(r"^\s*([A-Za-z]+)(?:\s+(.*?))?\s*$")


def read_modelfile(source: Any, *, text: str | None = None) -> Modelfile:
    """An Ollama Modelfile (a path, or ``text`` read as the file ``source`` names): its ``FROM`` and its
    ``PARAMETER`` lines. Commands are read case-insensitively, ``#`` lines are comments, a triple-quoted value
    (a TEMPLATE or SYSTEM) may span lines and is skipped. A line that is no command is refused with its place."""
    shown = str(source)
    if text is None:
        try:
            raw = Path(source).read_bytes()
        except OSError as e:
            raise SettingsError(f"{shown}: cannot read the Modelfile ({e.strerror or e})") from None
        if len(raw) > MAX_MODELFILE_BYTES:
            raise SettingsError(f"{shown}: the Modelfile has {len(raw):,} bytes; at most {MAX_MODELFILE_BYTES:,} are read")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SettingsError(f"{shown}: the Modelfile is not UTF-8 text") from None
    model, params, quoted = None, [], False
    for n, line in enumerate(text.splitlines(), 1):
        if quoted:  # inside a triple-quoted value
            quoted = line.count('"""') % 2 == 0
            continue
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _COMMAND.match(line)
        if m is None:
            raise SettingsError(f"{shown}:{n}:1: not a Modelfile command: {line.strip()[:60]!r}")
        command, rest = m.group(1).lower(), m.group(2) or ""
        if rest.count('"""') % 2 == 1:
            quoted = True
        if command == "from":
            model = rest.strip().strip('"')
        elif command == "parameter":
            parts = rest.split(None, 1)
            if len(parts) != 2:
                raise SettingsError(f"{shown}:{n}:1: PARAMETER takes a name and a value, got {rest.strip()!r}")
            value = parts[1].strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = shlex.split(value)[0] if value.count('"') == 2 else value[1:-1]
            params.append((parts[0].lower(), value, n))
    return Modelfile(shown, model, tuple(params))


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$")


def read_environment(text: str, *, source: str = "environment") -> dict[str, str]:
    """Environment variables written as a shell sets them, one ``NAME=VALUE`` a line (``export`` before it, quotes
    around the value, blank lines and ``#`` comments allowed): the variables a runtime's preset reads from
    ``os.environ`` when they are given as text instead (the page's form). A line that sets no variable is refused
    with its place; a variable given twice takes the later line, as a shell does."""
    if len(text.encode("utf-8")) > MAX_MODELFILE_BYTES:
        raise SettingsError(f"{source}: at most {MAX_MODELFILE_BYTES:,} bytes are read")
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        if m is None:
            raise SettingsError(f"{source}:{n}:1: not a NAME=VALUE line: {line.strip()[:60]!r}")
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[m.group(1)] = value
    return out


def _option_value(opt: PresetOption, raw: str, where: str) -> Any:
    """An option's value from the text an environment variable or a Modelfile gives."""
    text = raw.strip()
    if opt.type == "int":
        try:
            return int(text)
        except ValueError:
            raise SettingsError(f"{where}: {opt.name} must be a whole number, got {raw!r}") from None
    if opt.lower:
        text = text.lower()
    if opt.values is not None:
        return opt.values.get(text, opt.otherwise if opt.otherwise is not None else text)
    return text


def _setters(p: Preset, which) -> list:
    """How each option of ``which`` is set, in words (a Modelfile's PARAMETER, an environment variable)."""
    out = []
    for o in p.options:
        if o.name not in which:
            continue
        ways = ([f"PARAMETER {o.modelfile}"] if o.modelfile else []) + ([o.environment] if o.environment else [])
        if ways:
            out.append(" or ".join(ways))
    return out


def preset_settings(name: str, *, modelfile: Modelfile | str | Path | None = None,
                    environ: Mapping[str, str] | None = None, ctx_train: int | None = None,
                    gpu_total: int | None = None) -> PresetSettings:
    """The profile's settings a preset gives: each option from the Modelfile's ``PARAMETER`` (it wins), else its
    environment variable in ``environ`` (None: none read), else the runtime's default; then the derived values and
    the settings, evaluated over the options, ``ctx_train`` (the model's training context; None or 0: unknown)
    and ``gpu_total`` (the GPUs' memory in bytes; needed where an expression reads it, as Ollama's default
    context does when no num_ctx is set)."""
    p = preset(name)
    if modelfile is not None and not isinstance(modelfile, Modelfile):
        modelfile = read_modelfile(modelfile)
    from_file = {}
    for pname, raw, line in (modelfile.parameters if modelfile is not None else ()):
        from_file[pname] = (raw, line)
    env: dict = {"ctx_train": ctx_train or 0, "gpu_total": gpu_total}
    origin: dict = {}
    options = []
    for opt in p.options:
        if opt.modelfile is not None and opt.modelfile in from_file:
            raw, line = from_file[opt.modelfile]
            where = f"{modelfile.path}:{line}"
            value, said = _option_value(opt, raw, where), f"Modelfile {where} (PARAMETER {opt.modelfile})"
        elif opt.environment is not None and environ is not None and environ.get(opt.environment, "") != "":
            value = _option_value(opt, environ[opt.environment], f"environment variable {opt.environment}")
            said = f"environment {opt.environment}={environ[opt.environment]}"
        else:
            value, said = opt.default, f"{p.name} {p.release} default"
        env[opt.name] = value
        origin[opt.name] = said
        options.append((opt.name, value, said))
    default_words = f"{p.name} {p.release} default"

    def origin_of(expr) -> tuple:
        """The origins of the options an expression reads (through the derived values), defaults last."""
        seen, out, todo = set(), [], list(expr.names_read(env))
        rules = {n: e for n, e, _ in p.derived}
        while todo:
            n = todo.pop(0)
            if n in seen:
                continue
            seen.add(n)
            if n in rules:
                todo.extend(sorted(rules[n].names_read(env)))
            elif n in origin and origin[n] != default_words:
                out.append(origin[n])
            elif n == "gpu_total":
                out.append(f"{default_words} for the GPU's memory")
        return tuple(dict.fromkeys(out))

    derived, unknown, blame = {}, set(), set()  # unknown: values that read the GPU's memory where none was given
    names = {o.name for o in p.options}
    for dname, expr, _ in p.derived:
        reads = expr.names_read(env)
        if (gpu_total is None and "gpu_total" in reads) or reads & unknown:
            unknown.add(dname)
            blame.update(reads & names)  # the options that would have chosen another branch
            env[dname] = None
            continue
        env[dname] = derived[dname] = expr.evaluate(env)
    settings, origins = {}, {}
    for sname, expr, _ in p.settings:
        if expr.names_read(env) & unknown:
            raise SettingsError(f"{p.name} {p.release} sets {sname} by the GPU's memory here: give the GPU (fit --gpu) "
                                f"or {', '.join(_setters(p, blame))}")
        settings[sname] = expr.evaluate(env)
        words = origin_of(expr)
        origins[sname] = "; ".join(words) if words else default_words
    return PresetSettings(p.name, p.profile, settings, origins, tuple(options), derived)
