"""Config files: YAML text -> a validated `Config`, with `--set a.b=c` overrides, and back.

The schema lives in `core.config`; this module reads and writes it. All problems surface as
one-line `AttncliError`s naming the file, the key path and the fix, e.g.
``configs/x.yaml: model.d_modle: unknown key (did you mean model.d_model?)``.

YAML is read with `ConfigLoader`: YAML's safe loader made stricter in three places (below).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from attncli.core.config import Config, corpus_label
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_text


class ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader with three changes for configs: a key given twice in one mapping is
    refused (YAML keeps the last one silently, so a second `train:` section would drop the
    first); only true/false are booleans, as in YAML 1.2 (YAML 1.1 also reads no, yes, on,
    off, so `tgt: no`, Norwegian, became False; pydantic still takes yes/no for a boolean key);
    and integers are YAML 1.2's (`construct_yaml_int`).
    """

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool):
                continue  # an unhashable key: the base class says what is wrong with it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"duplicate key {key!r}",
                    key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


    def construct_yaml_int(self, node) -> int:
        """Integers as YAML 1.2 reads them: 010 is ten (YAML 1.1 made it eight, octal), 0o10
        eight, 0x10 sixteen; 1:30 is not a number (YAML 1.1: ninety, base 60)."""
        text = self.construct_scalar(node).replace("_", "")
        sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
        base = {"0o": 8, "0x": 16, "0b": 2}.get(digits[:2].lower(), 10)
        return sign * int(digits[2:] if base != 10 else digits, base)


_YAML_12 = {"tag:yaml.org,2002:bool": re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
            "tag:yaml.org,2002:int": re.compile(r"^[-+]?(?:[0-9][0-9_]*|0o[0-7]+|0x[0-9a-fA-F]+)$")}
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in resolvers if tag not in _YAML_12]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _YAML_12["tag:yaml.org,2002:bool"],
                                    list("tTfF"))
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:int", _YAML_12["tag:yaml.org,2002:int"],
                                    list("-+0123456789"))
ConfigLoader.add_constructor("tag:yaml.org,2002:int", ConfigLoader.construct_yaml_int)


def _all_key_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        paths.append(path)
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths.extend(_all_key_paths(ann, path + "."))
    return paths


def suggest_key(path: str) -> str:
    """' (did you mean X?)' for the closest valid key path, or '' when nothing is close."""
    candidates = _all_key_paths(Config)
    section = path.split(".")[0]
    same_section = [c for c in candidates if c.startswith(section + ".")]
    match = difflib.get_close_matches(path, same_section or candidates, n=1, cutoff=0.6)
    if not match:
        match = difflib.get_close_matches(path, candidates, n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def _format_validation_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    path = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{source}: {path}: unknown key{suggest_key(path)}"
    msg = first["msg"].removeprefix("Value error, ")
    given = first.get("input")
    if path and first["type"] != "value_error":
        return f"{source}: {path}: {msg} (got {given!r})"
    return f"{source}: {path + ': ' if path else ''}{msg}"


def parse_config(raw: dict[str, Any], source: str = "config") -> Config:
    """Validate a plain dict; errors name `source` and the key path."""
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise AttncliError(_format_validation_error(err, source)) from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """'train.max_steps=20' -> (['train', 'max_steps'], 20); the value is read as YAML.

    A longer key reaches into a list of the config by an item's name or number:
    'data.corpora.tatoeba.weight=3' or 'data.corpora.0.weight=3'.
    """
    if "=" not in item:
        raise AttncliError(f"--set {item!r}: expected KEY=VALUE, e.g. train.max_steps=20")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) < 2 or not all(parts):
        raise AttncliError(
            f"--set {item!r}: KEY must be section.key, e.g. model.dropout{suggest_key(key)}"
        )
    try:
        parsed = yaml.load(value, Loader=ConfigLoader) if value.strip() else None  # noqa: S506
    except yaml.YAMLError:
        parsed = value
    return parts, parsed


# `--set` of one form of the training data replaces the other form the file gives: a mix of
# corpora, or one data set (`--set data.dataset=X` on configs/en-zh.yaml trains on X alone).
# Another data set also drops the file's licence and attribution, which were the old data's
# (a model card must not name them for X), unless the same command sets them too.
REPLACED_BY_SET = {("data", "dataset"): ("corpora", "best_on", "licence", "attribution"),
                   ("data", "corpora"): ("dataset", "subset", "filters", "licence",
                                         "attribution")}


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set` items to a raw config dict (validation happens afterwards)."""
    given = {tuple(parse_override(item)[0][:2]) for item in overrides}
    for item in overrides:
        path, value = parse_override(item)
        section, key = path[0], path[1]
        if section not in Config.model_fields:
            raise AttncliError(f"--set {section}.{key}: unknown section{suggest_key(section)}")
        node = raw.setdefault(section, {})
        if not isinstance(node, dict):
            raise AttncliError(f"--set {section}.{key}: {section} is not a section")
        if len(path) > 2:
            _set_inside(node, path, value)
            continue
        if node.get(key) != value:
            for replaced in REPLACED_BY_SET.get((section, key), ()):
                if (section, replaced) not in given:
                    node.pop(replaced, None)
        node[key] = value
    return raw


def _set_inside(section: dict[str, Any], path: list[str], value: Any) -> None:
    """Set the key `path` names below its section, stepping into lists by an item's name or
    number (so a weight study needs no copied config); a key a mapping lacks is added and left
    to validation, which names it if it is unknown."""
    node: Any = section
    for depth in range(1, len(path) - 1):
        node = _child(node, path, depth)
    if not isinstance(node, dict):
        raise AttncliError(f"--set {'.'.join(path)}: {'.'.join(path[:-1])} is not a mapping")
    node[path[-1]] = value


def _child(node: Any, path: list[str], depth: int) -> Any:
    """What `path[depth]` names inside `node`: a list's item by its name (else its data set) or
    number, or a mapping's value (an empty mapping added where there is none)."""
    part, where = path[depth], ".".join(path[:depth])
    if isinstance(node, dict):
        if path[:2] == ["data", "corpora"] and depth == 1 and node.get(part) is None:
            raise AttncliError(f"--set {'.'.join(path)}: the config has no data.corpora list "
                               "(it names one data set, data.dataset); list the corpora in "
                               "the file to set one of them")
        if node.get(part) is None:
            node[part] = {}
        return node[part]
    if not isinstance(node, list):
        raise AttncliError(f"--set {'.'.join(path)}: {where} is not a mapping or a list")
    names = [corpus_label(item.get("name"), str(item.get("dataset") or i))
             if isinstance(item, dict) else str(i) for i, item in enumerate(node)]
    if part in names:
        return node[names.index(part)]
    if part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise AttncliError(f"--set {'.'.join(path)}: {where} has no item {part!r} "
                       f"(its items: {', '.join(names) or 'none'})")


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML mapping; malformed YAML names the file and line."""
    if not path.is_file():
        raise AttncliError(f"{path}: config file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AttncliError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    try:
        raw = yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise AttncliError(f"{path}:{where}: malformed YAML: {problem}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise AttncliError(f"{path}: expected a mapping of sections (data, model, ...) at top")
    # a section whose keys are all commented out keeps its defaults
    return {key: {} if value is None and key in Config.model_fields else value
            for key, value in raw.items()}


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, override and validate a YAML config."""
    path = Path(path)
    raw = apply_overrides(read_yaml(path), overrides or [])
    return parse_config(raw, source=str(path))


def save_config(config: Config, path: Path) -> None:
    """Write the fully resolved config (every key, defaults included)."""
    atomic_write_text(path, yaml.safe_dump(config.to_dict(), sort_keys=False, allow_unicode=True))
