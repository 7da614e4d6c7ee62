"""`attncli translate` and `attncli eval` end to end on a tiny fake run, plus the scoring helpers.

The run is built here (config, SentencePiece model, random weights): the tests are about the
command's behaviour, not about translation quality.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers import train_tokenizer

from attncli.core.config import Config, DataConfig, DecodeConfig, ModelConfig, TokenizerConfig
from attncli.core.config_files import save_config
from attncli.core.text import EOS_ID
from attncli.decoding.scoring import bleu_tokenizer, corpus_scores
from attncli.decoding.texts import encode_sources
from attncli.model.build import build_model, model_fingerprint
from attncli.runs.checkpoints import save_checkpoint
from attncli.runs.layout import RunPaths
from attncli.training.optim import make_optimizer

REPO = Path(__file__).resolve().parents[1]
MAX_POSITIONS = 64
SRC_WORDS = ["the", "a", "cat", "dog", "man", "woman", "sees", "runs", "big", "small", "red",
             "house", "street", "ball"]
TGT_WORDS = ["der", "die", "katze", "hund", "mann", "frau", "sieht", "läuft", "groß", "klein",
             "rot", "haus", "straße", "ball"]


def _sentences(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 8))).capitalize() + "."
            for _ in range(n)]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder holding runs/tiny (the newest run there) and data/tiny/{train,val,test}.jsonl."""
    root = tmp_path_factory.mktemp("translate")
    src, tgt = _sentences(SRC_WORDS, 60, 1), _sentences(TGT_WORDS, 60, 2)
    for split, (start, stop) in {"train": (0, 40), "val": (40, 50), "test": (50, 60)}.items():
        lines = [json.dumps({"en": s, "de": t}, ensure_ascii=False) + "\n"
                 for s, t in zip(src[start:stop], tgt[start:stop], strict=True)]
        (root / "data" / "tiny").mkdir(parents=True, exist_ok=True)
        (root / "data" / "tiny" / f"{split}.jsonl").write_text("".join(lines), encoding="utf-8")

    paths = RunPaths(root / "runs" / "tiny")
    paths.checkpoints.mkdir(parents=True)
    config = Config(
        data=DataConfig(dataset="tiny", src="en", tgt="de", max_len=MAX_POSITIONS - 8),
        tokenizer=TokenizerConfig(type="bpe", vocab_size=60),
        model=ModelConfig(d_model=32, heads=4, enc_layers=2, dec_layers=2, ff_dim=64,
                          dropout=0.0, max_positions=MAX_POSITIONS),
        decode=DecodeConfig(beam=2, batch_size=8, max_len_a=1.0, max_len_b=5),
    )
    save_config(config, paths.config)
    tokenizer = train_tokenizer(config.tokenizer, src[:40], tgt[:40], paths.root,
                                ("en", "de"))
    torch.manual_seed(0)
    model = build_model(config, tokenizer)
    save_checkpoint(paths, model, make_optimizer(model, config.train), {"step": 0},
                    fingerprint=model_fingerprint(config.model), best_step=0, keep=1)
    return root


@pytest.fixture(scope="module")
def run_dir(workdir) -> Path:
    return workdir / "runs" / "tiny"


def _env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "ATTNCLI_DATA_DIR": str(workdir / "data"), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO), "HF_HOME": str(workdir / "hf"), "HF_DATASETS_OFFLINE": "1"}


def _cli(workdir: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """Run `python -m attncli ARGS` in `workdir`; stdout and stderr come back as text."""
    done = subprocess.run([sys.executable, "-m", "attncli", *args], input=stdin,
                          capture_output=True, cwd=workdir, env=_env(workdir), timeout=300)
    out = subprocess.CompletedProcess(done.args, done.returncode,
                                      done.stdout.decode("utf-8"), done.stderr.decode("utf-8"))
    assert "Traceback" not in out.stderr, out.stderr
    return out


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# --------------------------------------------------------------------------------------------
# translate
# --------------------------------------------------------------------------------------------


def test_several_arguments_with_the_newest_run(workdir):
    out = _cli(workdir, "translate", "The cat sees a dog.", "A red house.", "The man runs.")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 3


def test_json_with_nbest_lists(workdir, run_dir):
    out = _cli(workdir, "translate", "--run", str(run_dir), "--json", "--nbest", "2",
               "The cat sees a dog.", "A red house.")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["source"] for r in records] == ["The cat sees a dog.", "A red house."]
    for r in records:
        assert len(r["hypotheses"]) == len(r["scores"]) == 2
        assert r["scores"] == sorted(r["scores"], reverse=True)
    out = _cli(workdir, "translate", "--run", str(run_dir), "--nbest", "3", "A cat.")
    assert out.returncode == 2 and _error_lines(out.stderr) == [
        "error: --nbest 3 needs --beam 3 or more (beam is 2)"]


def test_stdin_bad_lines_are_reported_and_the_others_translated(workdir, run_dir):
    """Without splitting a blank line is a bad one (with it, it is written as it is)."""
    lines = b"The cat sees a dog.\n\n   \nA red \xff\xfe house.\nThe man runs.\n"
    out = _cli(workdir, "translate", "--run", str(run_dir), "--json", "--no-split",
               stdin=lines)
    assert out.returncode == 2
    records = [json.loads(r) for r in out.stdout.splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["source"] for r in records] == ["The cat sees a dog.", None, None, None,
                                              "The man runs."]
    assert records[3]["error"] == "not valid UTF-8 (invalid start byte at byte 7)"
    errors = _error_lines(out.stderr)
    assert errors[:3] == ["error: line 2: empty input", "error: line 3: empty input",
                          "error: line 4: not valid UTF-8 (invalid start byte at byte 7)"]
    assert errors[3:] == ["error: 3 of 5 inputs could not be translated (see above)"]


def test_output_lines_stay_aligned_with_input_lines(workdir, run_dir, tmp_path):
    """A bad line's output line is empty, so line k of --output is line k of --input; a file
    in UTF-16 is caught by its NUL bytes."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"The cat sees a dog.\n\nA red \xff house.\nThe man runs.\n")
    target = tmp_path / "out.txt"
    out = _cli(workdir, "translate", "--run", str(run_dir), "--input", str(source),
               "--output", str(target))
    assert out.returncode == 2
    lines = target.read_text("utf-8").split("\n")
    assert len(lines) == 5 and lines[4] == ""  # four lines, each ending in a newline
    assert lines[0] and lines[3] and lines[1] == lines[2] == ""  # blank as given; bad: empty
    assert _error_lines(out.stderr)[-1] == ("error: 1 of 4 inputs could not be translated "
                                            "(see above) (their output lines are left empty)")
    source.write_bytes("A man.\nTwo dogs.\n".encode("utf-16-le"))  # no byte-order mark
    out = _cli(workdir, "translate", "--run", str(run_dir), "--input", str(source))
    assert "a NUL byte (is it UTF-16? attncli reads UTF-8)" in out.stderr
    assert out.returncode == 2 and len(out.stdout.splitlines()) == 3
    source.write_bytes("A man.\nTwo dogs.\n".encode("utf-16"))  # with one: refused whole
    out = _cli(workdir, "translate", "--run", str(run_dir), "--input", str(source))
    assert out.returncode == 2 and out.stdout == "" and _error_lines(out.stderr) == [
        f"error: {source}: UTF-16 (it starts with its byte-order mark); attncli reads UTF-8: "
        "convert it first, e.g. iconv -f UTF-16 -t UTF-8"]


@pytest.mark.parametrize(("option", "name", "message"), [
    ("--output", "folder", "is a folder; give a file name"),
    ("--output", "notes.txt/out.txt", "notes.txt is a file, not a folder"),
    ("--attention-png", "folder", "is a folder; give a file name"),
])
def test_unusable_output_names_are_refused_before_any_work(workdir, tmp_path, option, name,
                                                           message):
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("keep me")
    out = _cli(workdir, "translate", option, str(tmp_path / name), "A cat.")
    assert out.returncode == 2 and len(_error_lines(out.stderr)) == 1
    assert message in out.stderr and "checkpoint" not in out.stderr  # before the model loads
    assert (tmp_path / "notes.txt").read_text() == "keep me"


def test_outputs_write_through_links_and_pipes_with_the_umask_and_read_pipes(workdir, run_dir,
                                                                           tmp_path):
    """A symlink, a FIFO or a device named as --output was replaced by a regular file (the
    link's target untouched, the FIFO's reader given nothing), new files were 0600 whatever the
    umask, and --input refused a pipe as 'no such file'."""
    real, link, fifo = tmp_path / "real.txt", tmp_path / "link.txt", tmp_path / "fifo"
    real.write_text("old\n")
    link.symlink_to(real)
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    for target in (link, fifo, tmp_path / "new.txt"):
        out = _cli(workdir, "translate", "--run", str(run_dir), "--output", str(target),
                   "A cat.")
        assert out.returncode == 0, out.stderr
    reader.join(60)
    assert link.is_symlink() and real.read_text() != "old\n"
    assert fifo.is_fifo() and read[0].decode() == real.read_text()
    umask = os.umask(0)
    os.umask(umask)  # the subprocess's too
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    out = subprocess.run(f"{sys.executable} -m attncli translate --run {run_dir} --input "
                         "<(echo 'A cat.')", shell=True, executable="/bin/bash",
                         capture_output=True, text=True, cwd=workdir, env=_env(workdir))
    assert out.returncode == 0 and out.stdout == real.read_text(), out.stderr


def test_a_single_empty_argument_exits_2(workdir, run_dir):
    out = _cli(workdir, "translate", "--run", str(run_dir), "--no-split", "  ")
    assert out.returncode == 2 and _error_lines(out.stderr) == ["error: empty input"]
    assert out.stdout == ""


def test_stdin_is_translated_chunk_by_chunk_while_still_open(workdir, run_dir):
    """The first chunk's translations arrive before the input ends (nothing waits for EOF)."""
    from attncli.translate import CHUNK_LINES

    proc = subprocess.Popen([sys.executable, "-m", "attncli", "translate", "--run", str(run_dir),
                             "--beam", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=workdir, env=_env(workdir))
    watchdog = threading.Timer(240, proc.kill)
    watchdog.start()
    try:
        proc.stdin.write(b"A cat.\n" * CHUNK_LINES)
        proc.stdin.flush()
        first = [proc.stdout.readline() for _ in range(CHUNK_LINES)]
        assert all(first), "translations of the first chunk should come before end of input"
        proc.stdin.write(b"A dog.\n")
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait() == 0 and len(rest.splitlines()) == 1
    finally:
        watchdog.cancel()
        proc.kill()
        proc.stdout.close()
        proc.stderr.close()


def test_a_five_thousand_word_line_is_cut_with_a_warning(workdir, run_dir, tmp_path):
    from attncli.data.tokenizer import load_tokenizer

    source = tmp_path / "in.txt"
    source.write_text("A cat.\n" + " ".join(["house"] * 5000) + "\n", encoding="utf-8")
    target = tmp_path / "out" / "hyp.txt"
    out = _cli(workdir, "translate", "--run", str(run_dir), "--input", str(source),
               "--output", str(target), "--beam", "1", "--no-split")
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "line 2" in warnings[0]
    (ids,) = load_tokenizer(run_dir, joint=True).encode_src([" ".join(["house"] * 5000)])
    # subwords, the EOS not counted: it said one more of each
    assert f": {len(ids) - 1} subwords, only the first {MAX_POSITIONS - 9} are" in warnings[0]
    assert len(target.read_text(encoding="utf-8").splitlines()) == 2
    assert out.stdout == ""


def test_attention_heatmap_in_the_terminal_and_as_png(workdir, run_dir, tmp_path):
    from attncli.data.tokenizer import load_tokenizer

    png = tmp_path / "attention.png"
    out = _cli(workdir, "translate", "--run", str(run_dir), "--show-attention",
               "--attention-png", str(png), "--layer", "0", "The cat sees a dog.")
    assert out.returncode == 0, out.stderr
    tokenizer = load_tokenizer(run_dir, joint=True)
    for piece in tokenizer.src_pieces(tokenizer.encode_src(["The cat sees a dog."])[0]):
        assert piece in out.stdout
    assert "decoder layer 0" in out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    short = _cli(workdir, "translate", "--run", str(run_dir), "--show-attention",
                 "--attention-png", str(tmp_path / "head.png"), "--head", "1", "A cat.")
    # the title on one line (rich wrapped it to the narrow table's width)
    assert "argument 1: cross-attention, decoder layer 1, head 1" in short.stdout.splitlines()

    def width(path: Path) -> int:  # the PNG header's
        return int.from_bytes(path.read_bytes()[16:20], "big")

    # --head draws that head alone (the PNG drew every head and their mean whatever it said)
    assert width(tmp_path / "head.png") < width(png) / 2


def test_a_line_the_tokenizer_keeps_nothing_of_is_refused_like_an_empty_one(workdir, run_dir):
    """A zero-width space or control characters leave no subword: the model translated the
    bare end of sentence into a confident sentence, exit 0."""
    lines = "The cat sees a dog.\n\u200b\n\x01\x02\nThe man runs.\n".encode()
    out = _cli(workdir, "translate", "--run", str(run_dir), "--json", "--no-split",
               stdin=lines)
    assert out.returncode == 2
    records = [json.loads(r) for r in out.stdout.splitlines()]
    assert [r["source"] is None for r in records] == [False, True, True, False]
    problem = "only invisible or control characters, no text"
    assert records[1]["error"] == records[2]["error"] == problem
    assert _error_lines(out.stderr)[-1] == ("error: 2 of 4 inputs could not be translated "
                                             "(see above)")


def test_invisible_text_is_found_from_the_text_whatever_the_tokenizer_keeps():
    """An identity-normalized tokenizer (any joint model with zh, ja or ko) keeps a zero-width
    space or a control character as a piece: a check on the tokens let them through."""
    from attncli.translate import _check

    problem = "only invisible or control characters, no text"
    for text in ("\u200b", "\u200b \u2060\ufeff", "\x01\x02", "\u3000\u200b"):
        assert _check(1, "argument 1", text).problem == problem
    for text in ("猫", "a\u200b", "\u200b。", "🙂"):
        assert _check(1, "argument 1", text).problem is None


@pytest.mark.parametrize("args, message", [
    (["--exported", "nowhere"], "--exported nowhere needs --engine ctranslate2"),
    (["--layer", "0"], "--layer and --head choose what --show-attention or --attention-png show"),
    (["--head", "1"], "--layer and --head choose what --show-attention or --attention-png show"),
])
def test_options_that_would_do_nothing_are_refused(workdir, run_dir, args, message):
    """--exported without --engine ctranslate2 scored attncli's own decoder while the user
    believed the export was used; --layer/--head without a view were ignored."""
    out = _cli(workdir, "translate", "--run", str(run_dir), *args, "A cat.")
    assert out.returncode == 2 and _error_lines(out.stderr)[0].startswith(f"error: {message}")
    assert out.stdout == ""


@pytest.mark.parametrize("option, value, message", [
    ("--layer", "2", "--layer 2: the model has 2 decoder layers (0..1, or -1 for the last)"),
    ("--head", "4", "--head 4: the model has 4 heads (0..3)"),
])
def test_layer_and_head_are_checked(workdir, run_dir, option, value, message):
    out = _cli(workdir, "translate", "--run", str(run_dir), "--show-attention", option, value,
               "A cat.")
    assert out.returncode == 2 and _error_lines(out.stderr) == [f"error: {message}"]


def _broken_run(workdir: Path, run_dir: Path, name: str, damage) -> Path:
    """A copy of the run whose checkpoint weights `damage` spoils (it gets the path, the good
    weights); without pointers.json when `damage` is None."""
    broken = workdir / "broken" / name
    shutil.copytree(run_dir, broken)
    weights = broken / "checkpoints" / "step-0" / "model.safetensors"
    if damage is None:
        (broken / "checkpoints" / "pointers.json").unlink()
    else:
        damage(weights, (run_dir / "checkpoints" / "step-0" / "model.safetensors"))
    return broken


@pytest.mark.parametrize("name, damage, message", [
    ("no-checkpoint", None, "no checkpoint yet"),
    ("truncated", lambda path, good: path.write_bytes(good.read_bytes()[:500]),
     "not a valid safetensors checkpoint"),
    ("pickle", lambda path, good: torch.save({"weight": torch.zeros(3)}, path),
     "not a valid safetensors checkpoint"),
])
def test_a_bad_run_folder_is_a_one_line_error(workdir, run_dir, name, damage, message):
    broken = _broken_run(workdir, run_dir, name, damage)
    out = _cli(workdir, "translate", "--run", str(broken), "A cat.")
    assert out.returncode == 2
    (error,) = out.stderr.splitlines()
    assert error.startswith("error: ") and message in error


def test_no_run_anywhere_is_a_one_line_error(tmp_path):
    out = _cli(tmp_path, "translate", "A cat.")
    assert out.returncode == 2 and "no trained run under runs/" in out.stderr


# --------------------------------------------------------------------------------------------
# eval
# --------------------------------------------------------------------------------------------


def test_eval_writes_hypotheses_and_scores(workdir, run_dir):
    out = _cli(workdir, "eval", str(run_dir), "--split", "test", "--beam", "2", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["sentences"] == 10 and report["beam"] == 2
    assert "tok:13a" in report["signature"]
    for key in ("bleu", "chrf", "seconds", "sentences_per_s"):
        assert report[key] >= 0
    assert json.loads((run_dir / "eval" / "test.json").read_text("utf-8")) == report
    assert len((run_dir / "eval" / "test.hyp.txt").read_text("utf-8").splitlines()) == 10
    table = _cli(workdir, "eval", str(run_dir), "--split", "val")
    assert table.returncode == 0 and "BLEU" in table.stdout and "chrF" in table.stdout
    # the title on one line (rich wrapped a table's own title to the narrow table's width)
    assert table.stdout.splitlines()[0].startswith("tiny (") and ", beam " in \
        table.stdout.splitlines()[0]


def test_eval_of_other_data_says_what_it_left_out_and_keeps_the_runs_scores(workdir, run_dir,
                                                                           tmp_path):
    """Pairs with an empty side are counted and said; a --data split is written under its own
    name, so the run's own eval/test.json stays."""
    own = _cli(workdir, "eval", str(run_dir), "--split", "test", "--beam", "1", "--json")
    assert own.returncode == 0, own.stderr
    pairs = [{"en": "the cat sees a dog", "de": "die katze sieht"}, {"en": "", "de": "leer"},
             {"en": "a red house", "de": " "}, {"en": "the man runs", "de": "der mann"}]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    out = _cli(workdir, "eval", str(run_dir), "--data", str(other), "--beam", "1", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["sentences"] == 2 and report["left_out_empty"] == 2
    assert "2 pair(s) with an empty side were left out" in out.stderr
    written = sorted(p.name for p in (run_dir / "eval").glob("test*.json"))
    assert written == ["test-other.json", "test.json"]
    assert json.loads((run_dir / "eval" / "test.json").read_text()) == json.loads(own.stdout)


def test_eval_names_the_file_line_of_a_cut_source_and_checks_its_folder_first(workdir,
                                                                               run_dir,
                                                                               tmp_path):
    """Two empty pairs before a 400-word one: the warning said line 2 (its place among the
    pairs kept), not line 4. An eval folder that cannot be written is said before decoding."""
    rows = [{"en": "", "de": "x"}, {"en": " ", "de": "x"}, {"en": "A cat.", "de": "Eine."},
            {"en": "A dog " * 200, "de": "Ein Hund."}, {"en": "A cat.", "de": "Eine."}]
    data = tmp_path / "cut.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _cli(workdir, "eval", str(run_dir), "--data", str(data), "--beam", "1")
    assert out.returncode == 0, out.stderr
    assert "were cut to fit the model (first: line 4)" in out.stderr
    copy = Path(shutil.copytree(run_dir, tmp_path / "copy"))
    shutil.rmtree(copy / "eval", ignore_errors=True)
    (copy / "eval").write_text("not a folder")
    out = _cli(workdir, "eval", str(copy), "--data", str(data), "--beam", "1")
    assert out.returncode == 2 and _error_lines(out.stderr) == [
        f"error: {copy / 'eval'}: {copy / 'eval'} is a file, not a folder; eval writes its "
        "scores there"]


def test_no_repeat_ngram_option_reaches_eval_and_translate(workdir, run_dir, tmp_path):
    """The random run repeats subwords; `--no-repeat-ngram 1` (no subword twice) changes its
    outputs, eval reports the size it decoded with, and translate decodes as eval does."""
    sources = tmp_path / "test.en"
    lines = (workdir / "data" / "tiny" / "test.jsonl").read_text("utf-8").splitlines()
    sources.write_text("".join(json.loads(line)["en"] + "\n" for line in lines), "utf-8")
    outputs = {}
    for n in ("0", "1"):
        out = _cli(workdir, "eval", str(run_dir), "--beam", "1", "--json", "--no-repeat-ngram", n)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["no_repeat_ngram_size"] == int(n)
        outputs[n] = (run_dir / "eval" / "test.hyp.txt").read_text("utf-8")
    assert outputs["0"] != outputs["1"]
    one = _cli(workdir, "translate", "--run", str(run_dir), "--beam", "1", "--no-repeat-ngram",
               "1", "--input", str(sources))
    assert one.returncode == 0, one.stderr
    assert one.stdout == outputs["1"]


# --------------------------------------------------------------------------------------------
# scoring helpers
# --------------------------------------------------------------------------------------------


def test_corpus_scores_are_sacrebleu_scores():
    hyps = ["the cat sat on the mat", "a dog"]
    refs = ["the cat sat on the mat", "a big dog"]
    scores = corpus_scores(hyps, refs, "en")
    assert 0 < scores["bleu"] < 100 and 0 < scores["chrf"] < 100
    assert "tok:13a" in scores["signature"] and "nc:6" in scores["chrf_signature"]
    assert corpus_scores(hyps, hyps, "en")["bleu"] == pytest.approx(100.0)


def test_cjk_targets_use_a_matching_sacrebleu_tokenizer():
    assert bleu_tokenizer("zh") == "zh" and bleu_tokenizer("zh-Hans") == "zh"
    assert bleu_tokenizer("ja") in ("ja-mecab", "char")
    assert bleu_tokenizer("ko") in ("ko-mecab", "char")
    assert bleu_tokenizer("de") == "13a"
    assert "tok:zh" in corpus_scores(["我爱你"], ["我爱你"], "zh")["signature"]


def test_long_sources_are_cut_to_the_positions_and_end_in_eos(run_dir):
    from attncli.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(run_dir, joint=True)
    cut: list[tuple[int, int, int]] = []
    ids = encode_sources(tokenizer, ["a cat", "house " * 200], 32,
                         lambda i, n, kept: cut.append((i, n, kept)))
    assert len(ids[1]) == 24 and ids[1][-1] == EOS_ID and ids[0][-1] == EOS_ID
    # the warning's figures are subwords, the EOS not counted: 23 of them kept
    (whole,) = tokenizer.encode_src(["house " * 200])
    assert cut == [(1, len(whole) - 1, 23)] and ids[1][:23] == whole[:23]


def test_a_wide_heatmap_in_a_terminal_comes_in_blocks_that_keep_every_column():
    """Squeezed to the terminal's width, the table cut its labels short and dropped its last
    columns (`</s>` among them) without a word."""
    from rich.console import Console

    from attncli.translate import _AttentionView

    src = [f"▁word{i}" for i in range(20)] + ["</s>"]
    tgt = ["▁Ein", "▁Wort", "</s>"]
    view = _AttentionView.__new__(_AttentionView)
    view.console = Console(force_terminal=True, width=60, record=True, color_system=None)
    view._print_table([[1 / len(src)] * len(src)] * len(tgt), src, tgt, "attention")
    text = view.console.export_text()
    assert all(piece in text for piece in src) and "…" not in text
    assert "(source pieces 1-" in text and f"of {len(src)})" in text
    assert max(map(len, text.splitlines())) <= 60


@pytest.mark.parametrize("terminal", [True, False])
def test_a_heatmap_of_chinese_pieces_keeps_every_column_whole(terminal):
    """A CJK character takes two cells: counted as one, the blocks (and a pipe's width) came
    out too narrow, and rich cut pieces short and dropped `</s>`."""
    from rich.cells import cell_len
    from rich.console import Console

    from attncli.translate import _AttentionView

    src = ["▁如果", "不是", "因为", "有", "你的", "帮助", "，", "我", "不可能", "完成", "了",
           "这个", "工作", "。", "我很", "确定", "，", "汤姆", "是", "唯一", "能", "告诉",
           "我们", "需要", "知道", "的", "事情", "的人", "。", "</s>"]
    tgt = ["▁If", "▁it", "</s>"]
    view = _AttentionView.__new__(_AttentionView)
    view.console = Console(force_terminal=terminal, width=80, record=True, color_system=None)
    view._print_table([[1 / len(src)] * len(src)] * len(tgt), src, tgt, "attention")
    text = view.console.export_text()
    assert "…" not in text and all(piece in text for piece in src)
    if terminal:
        assert max(map(cell_len, text.splitlines())) <= 80


def test_an_output_the_terminal_cannot_encode_is_escaped_not_a_crash(workdir, run_dir):
    """On an ASCII or Latin-1 standard output, printing a translation (or a source) with other
    characters raised UnicodeEncodeError once the work was done: exit 1, output lost."""
    env = {**_env(workdir), "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "attncli", "translate", "--run", str(run_dir),
                           "--json", "Die Straße läuft."], capture_output=True, cwd=workdir,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["source"] == "Die Straße läuft."  # escaped, as JSON reads


def test_a_closed_standard_output_is_one_line(workdir, run_dir):
    done = subprocess.run(f"{sys.executable} -m attncli translate --run {run_dir} 'A cat.' >&-",
                          shell=True, capture_output=True, cwd=workdir, env=_env(workdir),
                          timeout=300)
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines()[-1] == (
        "error: standard output is closed: give --output FILE")


def test_translating_never_imports_the_compiler(served_run, tmp_path):
    """torch._dynamo costs most of a second to import: a command that does not compile (here a
    whole `attncli translate`, which loads a run and decodes) must not load it. (`cli.main`,
    not the entry point, which would end the process before the probe's last line.)"""
    import subprocess
    import sys

    from helpers import REPO

    probe = ("import sys; sys.argv = ['attncli', 'translate', '--run', sys.argv[1], "
             "'a dog sees the cat']\nfrom attncli.cli import main\ntry:\n    main()\n"
             "except SystemExit as stop:\n    assert not stop.code, stop.code\n"
             "print('dynamo' if 'torch._dynamo' in sys.modules else 'no dynamo')")
    done = subprocess.run([sys.executable, "-c", probe, str(served_run)], capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "no dynamo", done.stdout
