"""The server's decoder in this process, over a tiny run: requests of one batch are handed over
as their own sentences finish, with exactly what the whole batch returns."""

from __future__ import annotations

from attncli.runs.translator import Translator
from attncli.serve.served_run import ServedRun, Settings, Work

TEXTS = ["A dog.", "Two men in red shirts are playing football on a green field near a lake.",
         "A woman rides a bike.", "People."]


def test_works_are_delivered_as_their_sentences_end_and_equal_the_batch_answer(served_run):
    translator = ServedRun(Translator(served_run, device="cpu"))
    works = []
    for texts in (TEXTS[:1], TEXTS[1:3], TEXTS[3:]):
        ids, _ = translator.encode(texts)
        works.append(Work(ids, attention=False))
    ids, _ = translator.encode(TEXTS[:1])
    works.append(Work(ids, attention=True))
    delivered: list[tuple[int, list]] = []
    answers = translator.run_batch(Settings(beam=3, n_best=2),
                                   works, lambda k, found: delivered.append((k, found)))
    # every work without attention was delivered once, with what the batch returned
    assert sorted(k for k, _ in delivered) == [0, 1, 2]
    for k, found in delivered:
        assert found is answers[k]
    assert [len(a) for a in answers] == [1, 2, 1, 1]
    assert all(len(t.hypotheses) == 2 for answer in answers for t in answer)
    # the attention work is answered at the end, with the same translation as work 0
    assert answers[3][0].attention is not None
    assert answers[3][0].hypotheses[0].tokens == answers[0][0].hypotheses[0].tokens
    alone = translator.run_batch(Settings(beam=3, n_best=2), [works[1]])
    assert [[h.tokens for h in t.hypotheses] for t in alone[0]] == \
        [[h.tokens for h in t.hypotheses] for t in answers[1]]
