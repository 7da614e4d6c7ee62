"""Config files: YAML text -> a validated `Config`, with `--set a.b=c` overrides, and back.

The schema lives in attncli.config; this module reads and writes it. All problems surface as
one-line `AttncliError`s naming the file, the key path and the fix, e.g.
``configs/x.yaml: model.d_modle: unknown key (did you mean model.d_model?)``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from attncli.core.config import Config
from attncli.core.errors import AttncliError
from attncli.core.files import atomic_write_text
from attncli.core.yaml_loader import ConfigLoader


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
    """'train.max_steps=20' -> (['train', 'max_steps'], 20); the value is read as YAML."""
    if "=" not in item:
        raise AttncliError(f"--set {item!r}: expected KEY=VALUE, e.g. train.max_steps=20")
    key, value = item.split("=", 1)
    parts = key.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise AttncliError(
            f"--set {item!r}: KEY must be section.key, e.g. model.dropout{suggest_key(key)}"
        )
    try:
        parsed = yaml.load(value, Loader=ConfigLoader) if value.strip() else None  # noqa: S506
    except yaml.YAMLError:
        parsed = value
    return parts, parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `--set` items to a raw config dict (validation happens afterwards)."""
    for item in overrides:
        (section, key), value = parse_override(item)
        if section not in Config.model_fields:
            raise AttncliError(f"--set {section}.{key}: unknown section{suggest_key(section)}")
        node = raw.setdefault(section, {})
        if not isinstance(node, dict):
            raise AttncliError(f"--set {section}.{key}: {section} is not a section")
        node[key] = value
    return raw


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
