"""A data licence as the config states it: an SPDX identifier attncli knows, or free text, and
what the identifier restricts (non-commercial, share-alike, no derivatives).

The model card flags a model whose data forbids commercial use or asks derived works to keep
its licence from the identifier alone: attncli reads no licence text. The identifiers it knows
are the Creative Commons licences in their generic (unported) versions, CC0 and the Open Data
Commons licences, as SPDX spells them; anything else (a ported licence such as Tatoeba's
CC-BY 2.0 France, which SPDX does not list, or a sentence about a corpus's terms) is kept as
written and marked "check the terms", since nothing can be told from it.
"""

from __future__ import annotations

from dataclasses import dataclass

_CC_KINDS = ("BY", "BY-SA", "BY-ND", "BY-NC", "BY-NC-SA", "BY-NC-ND")
_CC_VERSIONS = ("1.0", "2.0", "2.5", "3.0", "4.0")
KNOWN_SPDX = frozenset({f"CC-{kind}-{version}" for kind in _CC_KINDS for version in _CC_VERSIONS}
                       | {"CC0-1.0", "PDDL-1.0", "ODC-By-1.0", "ODbL-1.0"})
SHARE_ALIKE_OTHERS = frozenset({"ODbL-1.0"})  # share-alike without "-SA" in the identifier
CHECK_THE_TERMS = "check the terms"


@dataclass(frozen=True)
class Licence:
    """One corpus's terms: `text` as the config gives it, `spdx` when it is an identifier
    attncli knows (then the flags are read from it), and the attribution asked for."""

    text: str | None
    attribution: str | None = None

    @property
    def spdx(self) -> str | None:
        return self.text if self.text in KNOWN_SPDX else None

    @property
    def non_commercial(self) -> bool:
        return self.spdx is not None and "-NC" in self.spdx

    @property
    def share_alike(self) -> bool:
        return self.spdx is not None and ("-SA" in self.spdx or self.spdx in SHARE_ALIKE_OTHERS)

    @property
    def no_derivatives(self) -> bool:
        return self.spdx is not None and "-ND" in self.spdx

    def flags(self) -> list[str]:
        """'NC', 'SA', 'ND' as the identifier says ([] for free text or none)."""
        return [flag for flag, on in (("NC", self.non_commercial), ("SA", self.share_alike),
                                      ("ND", self.no_derivatives)) if on]

    def describe(self) -> str:
        """The licence as the card shows it: the identifier, or the text marked to be checked,
        or that none was stated."""
        if self.text is None:
            return f"not stated in the config ({CHECK_THE_TERMS} of the data set)"
        if self.spdx is not None and self.spdx.startswith("CC-BY"):  # + CC's own spelling
            name = self.spdx.removeprefix("CC-").rsplit("-", 1)
            return f"{self.spdx} (SPDX; Creative Commons {name[0]} {name[1]})"
        if self.spdx is not None:
            return f"{self.spdx} (SPDX)"
        return f"{self.text} ({CHECK_THE_TERMS})"
