"""How attncli reads its YAML configs: YAML's safe loader, made stricter in three places.

Kept apart from ``config.py`` (what a config holds) because it is about the file format only.
"""

from __future__ import annotations

import re

import yaml


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
