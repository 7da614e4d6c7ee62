"""How attncli reads its YAML configs: YAML's safe loader, made stricter in two places.

Kept apart from ``config.py`` (what a config holds) because it is about the file format only.
"""

from __future__ import annotations

import re

import yaml


class ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader with two changes for configs: a key given twice in one mapping is
    refused (YAML keeps the last one silently, so a second `train:` section would drop the
    first), and only true/false are booleans, as in YAML 1.2 (YAML 1.1 also reads no, yes, on,
    off, so `tgt: no`, Norwegian, became False; pydantic still takes yes/no for a boolean key).
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


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rule) for tag, rule in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                    list("tTfF"))
