"""`attncli train CONFIG --init-from RUN`: a new run that starts from a trained run's weights,
with its model and tokenizer, on new data (issue 56).

Tiny runs: a parent trained 40 updates on the toy corpus, and children fine-tuned a few updates
on toy pairs drawn with other seeds (so their validation pairs are not the parent's).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import toy_pairs
from helpers import (
    SMALL,
    assert_one_line_error,
    losses,
    metrics,
    pointers,
    resume,
    run_cli,
    train,
)

from attncli.core.config_files import load_config
from attncli.core.errors import AttncliError
from attncli.runs.checkpoints import read_tensors
from attncli.runs.layout import RunPaths
from attncli.training.parent import Parent, child_config

PARENT_SETS = ["train.max_steps=40", "train.eval_every=20", "train.lr=0.005"]
# All val pairs (the step-0 score is then eval's on the val file), a few updates.
CHILD_SETS = ["data.valid_limit=null", "train.max_steps=5", "train.eval_every=5",
              "train.lr=0.002", "train.warmup_steps=4"]


def _write_corpus(folder: Path, first_seed: int, tgt_extra: str = "") -> Path:
    """Toy train/val/test splits drawn with seeds from `first_seed` (the parent's corpus used
    0, 1, 2); `tgt_extra` appended to every target."""
    folder.mkdir(parents=True, exist_ok=True)
    for seed, (split, count) in enumerate({"train": 200, "val": 24, "test": 24}.items(),
                                          first_seed):
        lines = [json.dumps({"en": p["en"], "de": p["de"] + tgt_extra}, ensure_ascii=False)
                 for p in toy_pairs(count, seed)]
        (folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file()}


def _weights(run: Path, checkpoint: str) -> dict:
    return read_tensors(run / "checkpoints" / checkpoint / "model.safetensors")[0]


@pytest.fixture(scope="module")
def parent(tmp_path_factory, data_dir) -> Path:
    """A tiny small.yaml run: 40 updates, saved at 20 and 40 (best and last: step-40)."""
    runs = tmp_path_factory.mktemp("parents")
    result = train(data_dir, runs, SMALL, "--name", "parent", sets=PARENT_SETS)
    assert result.returncode == 0, result.stderr
    return runs / "parent"


@pytest.fixture(scope="module")
def new_data(tmp_path_factory) -> Path:
    return _write_corpus(tmp_path_factory.mktemp("new") / "captions", first_seed=10)


def _child(data_dir: Path, runs: Path, parent: Path, new_data: Path, *args: str,
           sets: list[str] = (), cwd: Path | None = None):
    return train(data_dir, runs, SMALL, "--init-from", str(parent), *args,
                 sets=[f"data.dataset={new_data}", *CHILD_SETS, *sets], cwd=cwd)


@pytest.fixture(scope="module")
def child(tmp_path_factory, data_dir, parent, new_data) -> Path:
    runs = tmp_path_factory.mktemp("children")
    result = _child(data_dir, runs, parent, new_data, "--name", "child")
    assert result.returncode == 0, result.stderr
    return runs / "child"


# -- the start: the parent's weights scored, the schedule from step 0 ------------------------


def test_step_0_scores_the_parent_on_the_new_validation_pairs_as_eval_does(child, parent,
                                                                             new_data,
                                                                             tmp_path):
    at_0 = [e for e in metrics(child) if e["event"] == "val" and e["step"] == 0]
    assert len(at_0) == 1
    scored = tmp_path / "parent"  # eval writes into the run folder: a copy, not the parent
    shutil.copytree(parent, scored)
    out = run_cli("eval", str(scored), "--data", str(new_data / "val.jsonl"), "--beam", "1",
                  "--json", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["sentences"] == 24
    assert at_0[0]["val_bleu"] > 0  # a real score, or the equality below would say nothing
    assert at_0[0]["val_bleu"] == pytest.approx(report["bleu"], abs=5e-4)
    log = (child / "train.log").read_text()
    assert "validation step 0 (all 24 val pairs)" in log
    assert "(the parent's weights, before fine-tuning)" in log


def test_the_first_update_warms_up_from_zero_to_the_new_learning_rate(child):
    first = next(e for e in metrics(child) if e["event"] == "train")
    assert first["step"] == 1
    assert first["lr"] == pytest.approx(0.0005)  # train.lr 0.002 / warmup_steps 4


def test_step_0_is_never_best_nor_counted_for_patience(data_dir, parent, new_data, tmp_path,
                                                        monkeypatch):
    """Validations scored as falling (50 at step 0, then 10, then 5; set here, as what is
    tested is the bookkeeping): were step 0 counted, step 5 would not be best and patience (1)
    would stop the run there. It is not: step 5 is best, and patience stops the run at 10."""
    from attncli.training.validate import Validators, ValScores

    falling = iter([50.0, 10.0, 5.0])
    monkeypatch.setattr(Validators, "score", lambda self: {
        self.deciding: ValScores(1.0, next(falling), 0.0, 0.0)})
    result = _child(data_dir, tmp_path, parent, new_data, "--name", "falling",
                    sets=["train.max_steps=15", "train.patience=1"])
    assert result.returncode == 0, result.stderr
    run = tmp_path / "falling"
    vals = {e["step"]: e["val_bleu"] for e in metrics(run) if e["event"] == "val"}
    assert vals == {0: 50.0, 5: 10.0, 10: 5.0}
    assert "stopped at step 10 (patience); best greedy val BLEU 10.00" in result.stdout
    state = json.loads((run / "checkpoints" / "step-10" / "state.json").read_text())
    assert (state["best_step"], state["best_bleu"]) == (5, 10.0)
    assert pointers(run)["best"] == "step-5"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "pointers.json", "step-10", "step-5"]


# -- what the child is made of, and parent.json ------------------------------------------------


def test_the_child_has_the_parents_model_and_tokenizer_and_its_own_dropout(child, parent):
    own, theirs = load_config(child / "config.yaml"), load_config(parent / "config.yaml")
    assert own.tokenizer.model_dump() == theirs.tokenizer.model_dump()
    assert own.model.model_dump(exclude={"dropout"}) == theirs.model.model_dump(
        exclude={"dropout"})
    assert (child / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    assert own.data.dataset != theirs.data.dataset and own.train.lr == 0.002


def test_a_config_may_leave_the_model_out_and_gives_only_the_weightless_keys(parent,
                                                                              tmp_path):
    theirs = load_config(parent / "config.yaml")
    record = Parent(parent, RunPaths(parent), parent / "checkpoints" / "step-40", theirs)
    config_file = tmp_path / "bare.yaml"
    config_file.write_text("data: {dataset: elsewhere}\nmodel: {dropout: 0.3}\n")
    made = child_config(load_config(config_file), record, str(config_file))
    assert made.model.d_model == theirs.model.d_model == 32  # not the default 256
    assert made.model.dropout == 0.3
    assert made.tokenizer.model_dump() == theirs.tokenizer.model_dump()
    with pytest.raises(AttncliError, match=r"model\.heads: .* gives 4, the parent has 2"):
        child_config(load_config(config_file, ["model.heads=4"]), record, str(config_file))


def test_parent_json_records_the_parent_as_given_and_the_chain(data_dir, parent, new_data,
                                                                tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(parent, runs / "p")  # given relative to the working folder: "p"
    result = _child(data_dir, runs, Path("p"), new_data, "--name", "c", "--checkpoint",
                    "step-20", cwd=runs)
    assert result.returncode == 0, result.stderr
    record = json.loads((runs / "c" / "parent.json").read_text())
    weights = runs / "p" / "checkpoints" / "step-20" / "model.safetensors"
    assert record == {"run": "p", "checkpoint": "step-20", "updates": 20,
                      "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}
    result = _child(data_dir, runs, Path("c"), new_data, "--name", "g", cwd=runs)
    assert result.returncode == 0, result.stderr
    chained = json.loads((runs / "g" / "parent.json").read_text())
    assert (chained["run"], chained["checkpoint"], chained["updates"]) == ("c", "step-5", 5)
    assert chained["parent"] == record


def test_a_second_child_of_a_parent_is_a_new_folder_and_the_parent_is_untouched(
        data_dir, parent, new_data, tmp_path):
    before = _files(parent)
    for _ in range(2):
        result = _child(data_dir, tmp_path, parent, new_data, "--name", "twin")
        assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["twin", "twin-2"]
    assert _files(parent) == before


def test_the_log_says_how_much_of_the_new_data_the_parents_tokenizer_lacks(
        data_dir, parent, new_data, tmp_path):
    known = _child(data_dir, tmp_path, parent, new_data, "--name", "known",
                   sets=["train.max_steps=1"])
    assert known.returncode == 0, known.stderr
    assert "<unk> under the parent's tokenizer: 0.00% of the training targets'" in known.stdout
    assert "warning" not in known.stdout
    greek = _write_corpus(tmp_path / "greek-data", first_seed=20, tgt_extra=" λ")  # no λ in parent
    found = _child(data_dir, tmp_path, parent, greek, "--name", "greek",
                   sets=["train.max_steps=1"])
    assert found.returncode == 0, found.stderr
    warning = next(line for line in found.stdout.splitlines() if line.startswith("warning:"))
    assert "of the target tokens are <unk> (above 1%)" in warning
    assert "the most frequent unknown characters: 'λ' (200)" in warning
    assert "warning:" in (tmp_path / "greek" / "train.log").read_text()


# -- refusals: one line, exit 2, no run folder ---------------------------------------------


def _refused(result, expected: str, runs: Path) -> None:
    assert_one_line_error(result, expected)
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.iterdir())


@pytest.mark.parametrize("sets, expected", [
    (["data.src=de", "data.tgt=en"], "that run translates en->de and CONFIG de->en (the pair "
                                     "swapped)"),
    (["data.tgt=fr"], "(another language pair)"),
    (["model.d_model=64"], "model.d_model: "),
    (["tokenizer.vocab_size=500"], "tokenizer.vocab_size: "),
])
def test_what_the_parent_cannot_be_fine_tuned_into_is_refused_before_any_data_is_read(
        data_dir, parent, tmp_path, sets, expected):
    runs = tmp_path / "runs"
    missing = tmp_path / "no-such-data"  # were it read, the error would name it
    result = _child(data_dir, runs, parent, missing, sets=sets)
    _refused(result, expected, runs)


def test_another_tokenizer_model_file_is_refused_naming_both_values(data_dir, parent,
                                                                    new_data, tmp_path):
    runs = tmp_path / "runs"
    result = _child(data_dir, runs, parent, new_data,
                    sets=[f"tokenizer.model_file={parent / 'spm.model'}"])
    _refused(result, f"tokenizer.model_file: {SMALL} or --set gives '{parent / 'spm.model'}', "
                     f"the parent has None", runs)


def test_a_folder_that_is_not_a_parent_is_refused(data_dir, parent, new_data, tmp_path):
    runs = tmp_path / "runs"
    _refused(_child(data_dir, runs, tmp_path, new_data), "--init-from: ", runs)
    unsaved = tmp_path / "unsaved"
    unsaved.mkdir()
    shutil.copy(parent / "config.yaml", unsaved / "config.yaml")
    _refused(_child(data_dir, runs, unsaved, new_data), "no checkpoint yet", runs)
    _refused(_child(data_dir, runs, parent, new_data, "--checkpoint", "step-7"),
             "no checkpoint 'step-7'", runs)


def test_weights_that_do_not_fit_the_parents_config_are_refused_naming_the_first(
        data_dir, parent, new_data, tmp_path):
    from safetensors.torch import save_file

    broken = tmp_path / "broken"
    shutil.copytree(parent, broken)
    weights = broken / "checkpoints" / "step-40" / "model.safetensors"
    tensors, meta = read_tensors(weights)
    first = next(name for name in tensors if name.startswith("encoder_layers.0."))
    tensors[first] = tensors[first][..., :-1].contiguous()  # one column short
    save_file(tensors, weights, metadata=meta)
    runs = tmp_path / "runs"
    _refused(_child(data_dir, runs, broken, new_data),
             f"does not fit the model of its run's config.yaml: {first} has shape", runs)


def test_init_from_with_resume_and_checkpoint_without_init_from_are_refused(
        data_dir, parent, tmp_path):
    both = run_cli("train", "--resume", str(parent), "--init-from", str(parent),
                   data_dir=data_dir)
    assert_one_line_error(both, "give one of them")
    runs = tmp_path / "runs"
    alone = train(data_dir, runs, SMALL, "--checkpoint", "best")
    _refused(alone, "without --init-from there is none", runs)


# -- freezing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("freeze, frozen_prefixes", [
    ("[embeddings]", ("src_embed.",)),  # tied: also the target embedding and output projection
    ("[encoder, decoder]", ("encoder_", "decoder_", "output_bias")),
])
def test_frozen_tensors_keep_the_parents_weights_and_get_no_optimizer_state(
        data_dir, parent, new_data, tmp_path, freeze, frozen_prefixes):
    result = _child(data_dir, tmp_path, parent, new_data, "--name", "frozen",
                    sets=[f"train.freeze={freeze}"])
    assert result.returncode == 0, result.stderr
    before, after = _weights(parent, "step-40"), _weights(tmp_path / "frozen", "step-5")
    assert before.keys() == after.keys()
    for name in before:
        same = before[name].numpy().tobytes() == after[name].numpy().tobytes()
        assert same == name.startswith(frozen_prefixes), name
    trained = [name for name in before if not name.startswith(frozen_prefixes)]
    moments, _ = read_tensors(tmp_path / "frozen" / "checkpoints" / "step-5" /
                              "optimizer.safetensors")
    assert len(moments) == 2 * len(trained)  # exp_avg and exp_avg_sq of what trains only
    line = next(line for line in result.stdout.splitlines() if line.startswith("train.freeze"))
    assert ("(the output projection too" in line) == (freeze == "[embeddings]")
    assert line.endswith(f"{sum(after[n].numel() for n in trained):,} of "
                         f"{sum(t.numel() for t in after.values()):,} train")


def test_an_untied_output_projection_trains_when_the_embeddings_are_frozen(
        data_dir, new_data, tmp_path):
    runs = tmp_path / "runs"
    result = train(data_dir, runs, SMALL, "--name", "untied",
                   sets=["train.max_steps=10", "train.eval_every=10",
                         "model.tie_embeddings=false", "tokenizer.joint=false"])
    assert result.returncode == 0, result.stderr
    result = _child(data_dir, runs, runs / "untied", new_data, "--name", "child",
                    sets=["train.freeze=[embeddings]", "model.tie_embeddings=false",
                          "tokenizer.joint=false"])
    assert result.returncode == 0, result.stderr
    before, after = _weights(runs / "untied", "step-10"), _weights(runs / "child", "step-5")
    for name in ("src_embed.weight", "tgt_embed.weight"):
        assert before[name].equal(after[name]), name
    assert not before["output.weight"].equal(after["output.weight"])
    assert "(the output projection too" not in result.stdout


def test_freeze_is_refused_on_a_run_from_scratch_and_cannot_change_on_a_resume(
        data_dir, child, tmp_path):
    runs = tmp_path / "runs"
    scratch = train(data_dir, runs, SMALL, sets=["train.freeze=[encoder]"])
    _refused(scratch, "a run from scratch has none", runs)
    changed = resume(data_dir, child, "train.freeze=[encoder]", "train.max_steps=6")
    assert_one_line_error(changed, "train.freeze cannot change when resuming ([] -> "
                                   "['encoder']): it changes which parameters the saved "
                                   "optimizer state is of")


# -- the child afterwards: a run like any ----------------------------------------------------


def test_a_resumed_child_continues_itself_with_its_freezing(data_dir, parent, new_data,
                                                            tmp_path):
    """5 + 5 updates equal 10 in one go: the resume loads the child's checkpoint and
    optimizer (the frozen part's none), never the parent's weights again."""
    frozen = ["train.freeze=[encoder]", "train.eval_every=5"]
    whole = _child(data_dir, tmp_path, parent, new_data, "--name", "whole",
                   sets=[*frozen, "train.max_steps=10"])
    assert whole.returncode == 0, whole.stderr
    half = _child(data_dir, tmp_path, parent, new_data, "--name", "half", sets=frozen)
    assert half.returncode == 0, half.stderr
    again = resume(data_dir, tmp_path / "half", "train.max_steps=10")
    assert again.returncode == 0, again.stderr
    resumed, straight = losses(tmp_path / "half"), losses(tmp_path / "whole")
    assert sorted(resumed) == list(range(1, 11))
    for step in range(1, 11):
        assert resumed[step] == pytest.approx(straight[step], abs=1e-6), step
    assert [e["step"] for e in metrics(tmp_path / "half") if e["event"] == "val"] == [0, 5, 10]
    encoder = [n for n in _weights(parent, "step-40") if n.startswith("encoder_")]
    for name in encoder:
        assert _weights(parent, "step-40")[name].equal(
            _weights(tmp_path / "half", "step-10")[name])


def test_a_child_stopped_before_its_first_checkpoint_starts_again_from_its_parent(
        data_dir, child, tmp_path):
    run = tmp_path / "stopped"
    shutil.copytree(child, run)
    shutil.rmtree(run / "checkpoints")  # as if killed before its first save
    (run / "checkpoints").mkdir()
    result = resume(data_dir, run)
    assert result.returncode == 0, result.stderr
    assert "trains again from step 0 from its parent's weights" in result.stdout
    step_0 = [e["val_bleu"] for e in metrics(run) if e["event"] == "val" and e["step"] == 0]
    assert step_0 == [e["val_bleu"] for e in metrics(child)
                      if e["event"] == "val" and e["step"] == 0]
    assert pointers(run)["last"] == "step-5"


def test_a_child_is_evaluated_and_translated_as_any_run(child):
    out = run_cli("eval", str(child), "--beam", "1", "--json", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["sentences"] == 24
    out = run_cli("translate", "--run", str(child), "The man sees a red ball.")
    assert out.returncode == 0 and out.stdout.strip(), out.stderr


def test_a_childs_card_lists_its_parents_data_and_flags_its_licence(child, parent, tmp_path):
    """The card follows parent.json to the parent (where it was given, else beside the child):
    its corpora are listed under its name and its licence flags the child; a parent not found
    is named instead."""
    runs = tmp_path / "runs"
    shutil.copytree(parent, runs / "parent")
    shutil.copytree(child, runs / "child")
    record = json.loads((runs / "child" / "parent.json").read_text())
    record["run"] = "moved/parent"  # not where it was given: found beside the child
    (runs / "child" / "parent.json").write_text(json.dumps(record))
    config = yaml.safe_load((runs / "parent" / "config.yaml").read_text())
    config["data"]["licence"] = "CC-BY-NC-SA-4.0"
    (runs / "parent" / "config.yaml").write_text(yaml.safe_dump(config))
    assert run_cli("card", str(runs / "child")).returncode == 0
    card = (runs / "child" / "README.md").read_text()
    assert "**Licence: non-commercial (NC), share-alike (SA).**" in card
    assert "(parent run parent): CC-BY-NC-SA-4.0" in card
    shutil.rmtree(runs / "parent")
    assert run_cli("card", str(runs / "child")).returncode == 0
    card = (runs / "child" / "README.md").read_text()
    assert "**Fine-tuned from `moved/parent`**, not found from here" in card
    assert "non-commercial" not in card


def test_the_shipped_finetune_config_has_small_yamls_model_and_tokenizer():
    from helpers import REPO

    finetune = load_config(REPO / "configs" / "multi30k-finetune.yaml")
    small = load_config(SMALL)
    weightless = {"dropout", "attention_dropout", "attention"}
    assert finetune.model.model_dump(exclude=weightless) == small.model.model_dump(
        exclude=weightless)
    assert finetune.tokenizer.model_dump() == small.tokenizer.model_dump()
    assert finetune.data.valid_limit is None and finetune.train.freeze == []
    raw = yaml.safe_load((REPO / "configs" / "multi30k-finetune.yaml").read_text())
    assert raw["data"]["dataset"] == "multi30k"


# -- under torchrun: every process starts from the parent's weights ------------------------


def test_two_processes_fine_tune_as_one_process(data_dir, parent, new_data, tmp_path):
    """Each process loads the parent's weights before DDP wraps the model, which then sends
    rank 0's to the other: the two-process curve is the one-process curve."""
    import os
    import subprocess
    import sys

    from helpers import REPO, train_args

    shared = [f"data.dataset={new_data}", *CHILD_SETS, "train.accum_steps=2",
              "model.dropout=0", "train.batch_tokens=300"]
    one = train(data_dir, tmp_path, SMALL, "--init-from", str(parent), "--name", "one",
                sets=shared)
    assert one.returncode == 0, one.stderr
    command = [sys.executable, "-m", "attncli",
               *train_args(SMALL, "--init-from", str(parent), "--name", "two", runs=tmp_path,
                           sets=shared), "--nproc", "2"]
    env = {**os.environ, "ATTNCLI_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 processes share each update" in done.stdout
    two, reference = losses(tmp_path / "two"), losses(tmp_path / "one")
    assert sorted(two) == list(range(1, 6))
    for step in range(1, 6):
        assert two[step] == pytest.approx(reference[step], abs=1e-5), step
    assert [e["step"] for e in metrics(tmp_path / "two") if e["event"] == "val"] == [0, 5]


# -- the parts of a model, and a checkpoint that does not fit ------------------------------


@pytest.mark.parametrize("tie", [True, "decoder", False])
def test_every_parameter_is_in_one_part_of_the_model(tiny_model_config, tie):
    from attncli.model.transformer import Seq2SeqTransformer

    cfg = tiny_model_config.model_copy(update={"tie_embeddings": tie})
    model = Seq2SeqTransformer(cfg, 50, 50 if tie is True else 60)
    parts = [model.part_parameters(part) for part in ("embeddings", "encoder", "decoder")]
    ids = [id(p) for found in parts for p in found]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    output = model.tgt_embed.weight if cfg.ties_output else model.output.weight
    assert any(p is output for p in parts[0 if cfg.ties_output else 2])


def test_a_mismatch_is_named_by_the_first_tensor_that_differs(tiny_model_config):
    import torch

    from attncli.model.transformer import Seq2SeqTransformer
    from attncli.runs.checkpoints import tensor_mismatch, unique_state_dict

    model = Seq2SeqTransformer(tiny_model_config, 50, 50)
    tensors = unique_state_dict(model)
    assert "tgt_embed.weight" not in tensors  # tied: stored once, found through its twin
    with torch.device("meta"):
        assert tensor_mismatch(Seq2SeqTransformer(tiny_model_config, 50, 50), tensors) is None
    names = list(tensors)
    wrong = {**tensors, names[3]: tensors[names[3]][:1], names[5]: tensors[names[5]][:1]}
    assert tensor_mismatch(model, wrong).startswith(f"{names[3]} has shape [1")
    assert tensor_mismatch(model, {k: v for k, v in tensors.items() if k != names[2]}) == \
        f"{names[2]} is missing"
    assert tensor_mismatch(model, {**tensors, "extra": tensors[names[0]]}) == \
        "extra is not a tensor of the config's model"


@pytest.mark.parametrize("value, message", [
    ("[encoder, encoder]", "'encoder' is listed twice"),
    ("[embeddings, decoder, encoder]", "nothing would train"),
    ("[heads]", "train.freeze.0: Input should be 'embeddings', 'encoder' or 'decoder'"),
])
def test_freeze_names_parts_once_and_leaves_some_to_train(value, message):
    with pytest.raises(AttncliError, match=message.replace("[", r"\[").replace(".", r"\.")):
        load_config(SMALL, [f"train.freeze={value}"])
