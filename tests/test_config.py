"""Config: defaults, overrides with type conversion, and one-line errors from the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attncli.core.config import Config
from attncli.core.config_files import load_config, parse_config, read_yaml
from attncli.core.errors import AttncliError
from attncli.model.build import model_fingerprint
from attncli.training.resume_rules import check_resume_changes

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_required_key_names_exist_with_defaults():
    cfg = Config()
    for section, key in [("data", "dataset"), ("data", "src"), ("data", "tgt"),
                         ("train", "max_steps"), ("train", "max_minutes"),
                         ("train", "eval_every"), ("train", "batch_tokens")]:
        assert hasattr(getattr(cfg, section), key)


def test_overrides_convert_types(tmp_path):
    path = _write(tmp_path, "model:\n  d_model: 64\n  heads: 4\n")
    cfg = load_config(path, ["train.max_steps=20", "model.dropout=0.3", "data.src=fr",
                             "train.compile=true"])
    assert cfg.train.max_steps == 20 and cfg.model.dropout == 0.3
    assert cfg.data.src == "fr" and cfg.train.compile is True and cfg.model.d_model == 64


def test_overrides_reach_a_corpus_by_name_or_number():
    cfg = load_config(REPO / "configs" / "en-zh.yaml",
                      ["data.corpora.tatoeba.weight=3", "data.corpora.1.filters.duplicates=true",
                       "data.corpora.dailydialog.filters.length_ratio=2.5"])
    tatoeba, dailydialog = cfg.data.corpora
    assert tatoeba.weight == 3 and not tatoeba.filters.duplicates
    assert dailydialog.weight == 1 and dailydialog.filters.duplicates
    assert dailydialog.filters.length_ratio == 2.5 and dailydialog.filters.script


def test_overrides_reach_an_unnamed_corpus_by_its_label(tmp_path):
    path = _write(tmp_path, "data:\n  corpora:\n    - dataset: /data/tatoeba-en-zh\n"
                            "    - dataset: ./more/dialogues.tsv\n")
    cfg = load_config(path, ["data.corpora.dialogues.weight=2",
                             "data.corpora.tatoeba-en-zh.weight=0.5"])
    assert [c.label for c in cfg.data.corpora] == ["tatoeba-en-zh", "dialogues"]
    assert [c.weight for c in cfg.data.corpora] == [0.5, 2]


def test_override_of_a_corpus_on_a_one_corpus_config_is_one_line(tmp_path):
    path = _write(tmp_path, "data:\n  dataset: tatoeba-en-de\n")
    with pytest.raises(AttncliError) as info:
        load_config(path, ["data.corpora.tatoeba.weight=2"])
    assert str(info.value).startswith("--set data.corpora.tatoeba.weight: the config has no "
                                      "data.corpora list (it names one data set, data.dataset)")


def test_override_of_one_corpus_filters_adds_the_mapping(tmp_path):
    path = _write(tmp_path, "data:\n  dataset: tatoeba-en-de\n")
    cfg = load_config(path, ["data.filters.same_text=true"])
    assert cfg.data.filters.same_text and not cfg.data.filters.script


@pytest.mark.parametrize(
    "override, expected",
    [
        ("data.corpora.opus.weight=2",
         "--set data.corpora.opus.weight: data.corpora has no item 'opus' "
         "(its items: tatoeba, dailydialog)"),
        ("data.corpora.5.weight=2", "has no item '5'"),
        ("data.corpora.tatoeba.wieght=2", "data.corpora.0.wieght: unknown key"),
        ("data.corpora.tatoeba.weight=0", "data.corpora.0.weight"),
        ("data.corpora.tatoeba=2", "data.corpora is not a mapping"),
        ("model.dropout.rate=0.1", "model.dropout is not a mapping"),
    ],
)
def test_bad_override_inside_a_list_is_one_line(override, expected):
    with pytest.raises(AttncliError) as info:
        load_config(REPO / "configs" / "en-zh.yaml", [override])
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_yaml_anchors_and_merge_keys_still_read(tmp_path):
    """Refusing duplicate keys leaves YAML's own overrides alone: `<<: *base` then a key."""
    text = "x-base: &base\n  lr: 0.002\n  max_steps: 9\ntrain:\n  <<: *base\n  lr: 0.003\n"
    raw = read_yaml(_write(tmp_path, text))
    assert raw["train"] == {"lr": 0.003, "max_steps": 9}


def test_norwegian_and_empty_sections_read_as_meant(tmp_path):
    """`tgt: no` is Norwegian, not YAML 1.1's False; a section whose keys are all commented out
    keeps its defaults; yes/on still set a boolean key."""
    text = "data:\n  src: en\n  tgt: no\nmodel:\n  # d_model: 64\ntokenizer:\n  joint: yes\n"
    config = load_config(_write(tmp_path, text), ["train.compile=on", "data.src=nb"])
    assert (config.data.src, config.data.tgt) == ("nb", "no")
    assert config.model.d_model == Config().model.d_model
    assert config.tokenizer.joint is True and config.train.compile is True


def test_numbers_are_read_as_yaml_1_2_and_never_from_true_or_false(tmp_path):
    """`--set train.max_steps=010` trained 8 steps (YAML 1.1's octal) and `=true` 1 step."""
    path = _write(tmp_path, "train:\n  max_steps: 010\n  batch_tokens: 0x800\n")
    config = load_config(path, ["train.eval_every=0o20", "train.save_every=1_000"])
    assert (config.train.max_steps, config.train.batch_tokens) == (10, 2048)
    assert (config.train.eval_every, config.train.save_every) == (16, 1000)
    for bad in ("train.max_steps=true", "model.dropout=false", "train.max_minutes=1:30"):
        with pytest.raises(AttncliError):
            load_config(path, [bad])
    with pytest.raises(AttncliError, match="character_coverage: Input should be greater"):
        load_config(path, ["tokenizer.character_coverage=0.95"])  # SentencePiece's floor


def test_all_shipped_configs_validate():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        load_config(path)


@pytest.mark.parametrize(
    "text, overrides, expected",
    [
        ("model:\n  d_model: 256\n   heads: 4\n", [], "line 3"),
        ("model:\n  d_modle: 256\n", [],
         "model.d_modle: unknown key (did you mean model.d_model?)"),
        ("modle:\n  d_model: 256\n", [], "modle: unknown key (did you mean model?)"),
        ("model:\n  d_model: 250\n  heads: 4\n", [], "model.heads (4) must divide model.d_model"),
        ("model:\n  dropout: lots\n", [], "model.dropout"),
        ("train:\n  max_steps: -3\n", [], "train.max_steps"),
        ("train:\n  pad_multiple: 0\n", [], "pad_multiple: expected a whole number >= 1 or auto"),
        ("", ["train.pad_multiple=eight"], "train.pad_multiple: expected a whole number"),
        ("", ["train.max_stpes=5"], "train.max_stpes: unknown key (did you mean train.max_steps?)"),
        ("", ["train.max_steps"], "expected KEY=VALUE"),
        ("", ["train.betas=[0.9,1.0]"], "train.betas"),  # no bias correction: NaN weights
        ("", ["train.betas=[-0.1,0.98]"], "train.betas"),
        ("- just\n- a list\n", [], "expected a mapping"),
        ("train:\n  max_steps: 5\nmodel:\n  heads: 2\ntrain:\n  lr: 0.1\n", [],
         "line 5, column 1: malformed YAML: duplicate key 'train'"),  # the first would be lost
        ("train:\n  lr: 0.1\n  lr: 0.2\n", [], "duplicate key 'lr'"),
        ("", ["decode.max_len_a=.inf"], "decode.max_len_a: Input should be a finite number"),
        ("", ["train.lr=.inf"], "train.lr"),
        ("", ["data.tgt=en"], "src and tgt are both 'en'"),
        ("", ["tokenizer.vocab_size=3000000000"], "tokenizer.vocab_size"),
        ("", ["tokenizer.joint=false"], "tie_embeddings: decoder or false"),
        ("", ["model.tie_embeddings=output"], "Input should be True, False or 'decoder'"),
        ("", ["train.lr_schedule=linear"], "set train.max_steps, max_epochs or max_minutes"),
        ("", ["train.lr_schedule=wsd", "train.max_steps=10", "train.min_lr=0.01"],
         "train.min_lr (0.01) must be below train.lr (0.001)"),
        ("", ["train.lr_schedule=cosine"], "train.lr_schedule"),
        ("", ["train.lr_plan=[[50,900],[40,800]]"], "later than the one before"),
    ],
)
def test_bad_config_raises_one_line_error(tmp_path, text, overrides, expected):
    path = _write(tmp_path, text)
    with pytest.raises(AttncliError) as info:
        load_config(path, overrides)
    message = str(info.value)
    assert expected in message and "\n" not in message
    if "--set" not in message:
        assert str(path) in message


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


@pytest.mark.parametrize(
    "text, extra, expected",
    [
        ("model:\n  d_model: [256\n", [], "malformed YAML"),
        ("model:\n  d_modle: 256\n", [], "did you mean model.d_model?"),
        ("model:\n  d_model: 100\n  heads: 3\n", [], "must divide model.d_model"),
        ("model:\n  dropout: lots\n", [], "model.dropout"),
        ("model:\n  d_model: 64\n", ["--set", "model.hedas=2"], "did you mean model.heads?"),
        ("", ["--set", "train.seed=-1"], "train.seed"),  # numpy would refuse it after prepare
        ("", ["--name", "a/b"], "a run name is one folder name"),
        ("", ["--name", ""], "a run name is one folder name"),
        ("", ["--resume", "elsewhere"], "give no CONFIG"),
        ("", ["--name", "a" * 300], "a run name is at most 240"),  # the folder would fail
    ],
)
def test_cli_reports_bad_config_in_one_line_with_exit_2(tmp_path, text, extra, expected):
    path = _write(tmp_path, text)
    result = _cli("train", str(path), "--runs-dir", str(tmp_path / "runs"), *extra)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cli_missing_config_file(tmp_path):
    result = _cli("train", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2 and "config file not found" in result.stderr
    assert "Traceback" not in result.stderr


def test_pad_multiple_auto_depends_on_device_and_precision():
    import torch

    from attncli.core.device import resolve_pad_multiple

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_pad_multiple("auto", cpu, "fp32") == 1
    assert resolve_pad_multiple("auto", cpu, "bf16") == 8
    assert resolve_pad_multiple("auto", cuda, "bf16") == 8
    assert resolve_pad_multiple(4, cpu, "fp32") == 4
    assert load_config(REPO / "configs" / "small.yaml", ["train.pad_multiple=2"]).train \
        .pad_multiple == 2


def test_resume_accepts_what_the_saved_state_can_honour():
    saved = parse_config({})
    wanted = parse_config({"train": {"max_steps": 9, "lr": 0.01, "betas": [0.8, 0.9],
                                     "eval_every": 7, "patience": 2},
                           "model": {"dropout": 0.3}, "data": {"valid_limit": 5},
                           "decode": {"beam": 2, "length_penalty": 0.6}})
    check_resume_changes(saved, wanted, "runs/x")  # no error


def test_model_fingerprint_follows_the_weights_shape_only():
    base = parse_config({}).model
    assert model_fingerprint(base) == model_fingerprint(base.model_copy(update={"dropout": 0.3}))
    assert model_fingerprint(base) != model_fingerprint(base.model_copy(update={"ff_dim": 512}))
