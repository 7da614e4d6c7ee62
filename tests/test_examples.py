"""`train.examples`: the model's translations of a few sentences at each validation, in the
console, train.log, metrics.jsonl and TensorBoard, with no effect on the training itself."""

from __future__ import annotations

import pytest
from helpers import REPO, SMALL, metrics, resume, train

from attncli.core.config import MAX_EXAMPLES
from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError

EXAMPLES = ["The man sees a red ball.", "A girl | paints the old car."]
SCHEDULE = ["train.max_steps=8", "train.eval_every=4", f"train.examples={EXAMPLES}"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir):
    """The same run with and without examples; dropout on, so a random draw would show."""
    root = tmp_path_factory.mktemp("examples")
    for name, sets in (("with", SCHEDULE), ("without", [*SCHEDULE, "train.examples=[]"])):
        result = train(data_dir, root, SMALL, "--name", name, sets=[*sets, "model.dropout=0.3"])
        assert result.returncode == 0, result.stderr
        (root / f"{name}.out").write_text(result.stdout, "utf-8")
    return root


def test_examples_are_shown_at_each_validation(runs):
    events = [e for e in metrics(runs / "with") if e["event"] == "examples"]
    assert [e["step"] for e in events] == [4, 8]
    for event in events:
        assert [e["source"] for e in event["examples"]] == EXAMPLES
        assert all(isinstance(e["output"], str) for e in event["examples"])
    outputs = [e["output"] for e in events[-1]["examples"]]
    for text in ((runs / "with.out").read_text("utf-8"), (runs / "with" / "train.log")
                 .read_text("utf-8")):
        assert text.count(f"example 1: {EXAMPLES[0]}") == 2
        assert f"example 2: {EXAMPLES[1]}\n          -> {outputs[1]}" in text
    assert not [e for e in metrics(runs / "without") if e["event"] == "examples"]


def test_the_loss_curve_is_the_same_with_and_without_examples(runs):
    """fp32 (the tests' precision), compared exactly: the examples draw no random number."""
    def curve(run):
        return [(e["step"], e["loss"], e["grad_norm"]) for e in metrics(run)
                if e["event"] == "train"]

    assert len(curve(runs / "with")) == 8
    assert curve(runs / "with") == curve(runs / "without")
    vals = [[(e["val_loss"], e["val_bleu"]) for e in metrics(runs / name) if e["event"] == "val"]
            for name in ("with", "without")]
    assert vals[0] == vals[1]


def test_tensorboard_shows_the_examples_as_text(runs):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(runs / "with" / "tensorboard"),
                              size_guidance={"tensors": 0}).Reload()
    texts = events.Tensors("examples/text_summary")
    assert [t.step for t in texts] == [4, 8]
    table = texts[-1].tensor_proto.string_val[0].decode()
    assert "| source | output |" in table and "A girl \\| paints the old car." in table


def test_examples_may_change_on_resume(runs, data_dir, tmp_path):
    import shutil

    run = shutil.copytree(runs / "without", tmp_path / "resumed")
    result = resume(data_dir, run, "train.max_steps=12", "train.examples=['A dog finds the cat.']")
    assert result.returncode == 0, result.stderr
    assert "example 1: A dog finds the cat." in result.stdout


@pytest.mark.parametrize("value, message", [
    ("['']", "example 1 ('') holds no text"),
    ("['A dog.', '   ']", "example 2 ('   ') holds no text"),
    ("[3]", "train.examples.0: Input should be a valid string"),
    ("A dog.", "train.examples: Input should be a valid list"),
    (str(["a"] * (MAX_EXAMPLES + 1)), f"at most {MAX_EXAMPLES} examples"),
])
def test_examples_are_checked_when_the_config_is_read(value, message):
    with pytest.raises(AttncliError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(SMALL, [f"train.examples={value}"])


def test_the_shipped_everyday_configs_watch_the_greeting():
    for name in ("small", "en-zh"):
        examples = load_config(REPO / "configs" / f"{name}.yaml").train.examples
        assert examples[0] == "Hello, how are you?" and len(examples) == 3
    assert load_config(SMALL, ["train.examples=null"]).train.examples == []
