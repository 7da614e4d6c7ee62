"""The runs one server serves, by language pair: which run a request goes to.

`attncli serve RUN_EN_DE RUN_EN_ZH` loads each run once; a request names its pair (`source`,
`target`) and goes to the run that translates it. Two runs with the same pair would make the
choice arbitrary, so they are refused at start. Each run's requests are batched apart (the
batcher's key holds the run's index): sentences of different models never share a batch.

One run served behaves as before: a request may leave its pair out of `/v1/translate`, and a
wrong pair is answered with that run's own message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from attncli.core.errors import AttncliError
from attncli.core.text import base_language, language_name
from attncli.serve.requests import RequestError
from attncli.serve.served_run import Settings, Translation, Work


class Served(Protocol):
    """What routing and the handlers ask of a run (`translator.ServedRun`; tests fake it)."""

    languages: tuple[str, str]
    beam: int
    attention: bool
    description: dict[str, Any]

    def run_batch(self, settings: Settings, works: list[Work],
                  deliver: Callable[[int, Any], None]) -> list[list[Translation]]: ...


class Pairs:
    """The served runs and their pairs; `route` picks a request's run."""

    def __init__(self, runs: Sequence[Served]):
        self.runs = list(runs)
        self._by_pair = check_pairs([(_name(run), run.languages) for run in self.runs])

    @property
    def single(self) -> bool:
        return len(self.runs) == 1

    def route(self, source: str | None, target: str | None) -> int:
        """The index of the run that translates `source` to `target`, or a 400 that says which
        pairs are served. One run served takes every request: its request parser checks the
        pair, with the messages it always gave."""
        if self.single:
            return 0
        if source is None or target is None:
            missing = "source" if source is None else "target"
            raise RequestError(400, f"{missing}: missing; this server translates "
                                    f"{self.described()} (give source and target)")
        found = self._by_pair.get((base_language(source), base_language(target)))
        if found is None:
            raise RequestError(400, f"{source}->{target}: no run here translates it; this "
                                    f"server translates {self.described()}")
        return found

    def sources_to(self, target: str | None) -> set[str]:
        """The (base) source languages of the runs that translate to `target` (any: None)."""
        return {source for source, to in self._by_pair
                if target is None or to == base_language(target)}

    def described(self) -> str:
        """The pairs served, for messages: "en->de, en->zh"."""
        return ", ".join(f"{run.languages[0]}->{run.languages[1]}" for run in self.runs)

    def languages(self) -> list[dict[str, Any]]:
        """GET /languages in LibreTranslate's shape: each language with the targets it
        translates to (a language only translated into has none)."""
        targets: dict[str, list[str]] = {}
        for run in self.runs:
            src, tgt = run.languages
            targets.setdefault(src, [])
            if tgt not in targets[src]:
                targets[src].append(tgt)
            targets.setdefault(tgt, [])
        return [{"code": code, "name": language_name(code), "targets": found}
                for code, found in targets.items()]

    def run_batch(self, key: tuple[int, Settings], works: list[Work],
                  deliver: Callable[[int, Any], None]) -> list[list[Translation]]:
        """The batcher's `run_batch`: its key is (run index, decoding settings)."""
        k, settings = key
        return self.runs[k].run_batch(settings, works, deliver)


def check_pairs(named: Sequence[tuple[str, tuple[str, str]]]) -> dict[tuple[str, str], int]:
    """Each (run name, (source, target)) by its pair; two runs with one pair are refused
    (which one answered would be arbitrary). The serve command calls it on the runs' configs
    before it loads any model."""
    seen: dict[tuple[str, str], int] = {}
    for k, (name, languages) in enumerate(named):
        pair = (base_language(languages[0]), base_language(languages[1]))
        if pair in seen:
            raise AttncliError(f"{named[seen[pair]][0]} and {name} both translate "
                               f"{pair[0]}->{pair[1]}: serve one run per language pair")
        seen[pair] = k
    return seen


def _name(run: Served) -> str:
    return str(run.description.get("run", "a run"))
