"""The model card (README.md) and the licences it reads: written when training ends and by
`attncli card`, from what the run folder recorded (corpora, machine, scores, examples), with
no absolute path and nothing the run did not record; `data.licence` in the config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import SMALL, TINY, assert_one_line_error, resume, run_cli, train

from attncli.core.config_files import load_config, parse_config
from attncli.core.errors import AttncliError
from attncli.core.licences import Licence

EXAMPLE = "The man sees a red ball."


@pytest.fixture(scope="module")
def run(tmp_path_factory, data_dir) -> Path:
    root = tmp_path_factory.mktemp("card")
    result = train(data_dir, root, SMALL, "--name", "tiny",
                   sets=["train.max_steps=6", f"train.examples=[{EXAMPLE}]"])
    assert result.returncode == 0, result.stderr
    assert "model card of step-6 written to" in result.stdout
    return root / "tiny"


def test_training_ends_with_a_card_of_what_the_run_recorded(run):
    card = (run / "README.md").read_text()
    assert card.startswith("# tiny: English → German translation")
    assert "**Check the terms** of tatoeba-en-de (CC-BY 2.0 FR)" in card
    assert "| tatoeba-en-de | tatoeba-en-de | 400 | CC-BY 2.0 FR (check the terms) | " \
           "tatoeba.org and www.manythings.org/anki |" in card
    assert "**Licence:" not in card  # CC BY restricts neither commercial use nor licence
    machine = json.loads((run / "machine.json").read_text())
    assert machine[0]["from_step"] == 0 and machine[0]["precision"] == "fp32"
    assert f"trained in fp32 on {machine[0]['device_name']}" in card
    assert_the_host_is_recorded_and_carded(machine[0], card)
    assert "- 6 updates" in card and "minutes of training" in card
    assert f"| {EXAMPLE} |" in card  # the example and what step-6 makes of it
    assert "1 encoder and 1 decoder layers, width 32" in card
    assert str(run.parent) not in card and "/tmp" not in card
    assert "No `attncli eval` score of this checkpoint" in card


def assert_the_host_is_recorded_and_carded(entry: dict, card: str) -> None:
    """Issue 63: what tells apart hosts of one CPU name, in machine.json and on the card."""
    assert isinstance(entry["usable_cpus"], int) and entry["usable_cpus"] >= 1
    assert entry["usable_cpus"] <= entry["affinity_cpus"] and entry["torch_threads"] >= 1
    assert set(entry["cpu_flags"]) <= {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    for key in ("cpu_vendor", "cpu_family", "cpu_model", "cpu_stepping", "threads_per_core",
                "cgroup_cpu_quota"):
        assert key in entry  # None where this machine does not say (not Linux, ARM)
    calibration = entry["calibration"]
    assert calibration["precision"] == "fp32" and calibration["tflops"] > 0
    assert calibration["threads"] == entry["torch_threads"] and "lowers it" in calibration["note"]
    assert f"{calibration['tflops']:.3g} TFLOP/s fp32 measured at start" in card
    assert f"{entry['usable_cpus']} usable CPU" in card
    assert f"{entry['torch_threads']} torch thread" in card
    if entry["cpu_family"] is not None:
        assert (f"{entry['cpu_vendor']} family {entry['cpu_family']} model {entry['cpu_model']} "
                f"stepping {entry['cpu_stepping']}") in card
    assert "None" not in card


def test_an_entry_from_before_the_host_facts_reads_as_it_did(run, tmp_path):
    """machine.json written before issue 63 (name, cores, bf16): no new fact, no "None"."""
    copy = Path(shutil.copytree(run, tmp_path / "older"))
    old = {"from_step": 0, "precision": "bf16", "device": "cpu", "device_name": "AMD EPYC",
           "cpu": "AMD EPYC", "cpu_cores": 2, "cpu_bf16": True, "processes": 1,
           "torch": "2.13.0+cpu", "system": "Linux x86_64"}
    (copy / "machine.json").write_text(json.dumps([old]))
    result = run_cli("card", str(copy))
    assert result.returncode == 0, result.stderr
    card = (copy / "README.md").read_text()
    assert ("- trained in bf16 on AMD EPYC (2 cores, AVX-512-BF16 or AMX); torch 2.13.0+cpu, "
            "Linux x86_64\n") in card
    assert "None" not in card and "TFLOP/s" not in card and "usable" not in card


def test_a_non_commercial_share_alike_corpus_is_flagged_at_the_top(run, tmp_path):
    """The flag line comes from the SPDX identifier (CC-BY-NC-SA-4.0), above everything."""
    copy = Path(shutil.copytree(run, tmp_path / "nc"))
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["data"]["licence"] = "CC-BY-NC-SA-4.0"
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    assert run_cli("card", str(copy)).returncode == 0
    card = (copy / "README.md").read_text()
    flag = card.index("**Licence: non-commercial (NC), share-alike (SA).**")
    assert flag < card.index("## Languages")
    assert "tatoeba-en-de: CC-BY-NC-SA-4.0" in card and "Check the terms" not in card


def test_scores_are_those_of_the_carded_checkpoint_with_their_signature(run, data_dir, tmp_path):
    copy = Path(shutil.copytree(run, tmp_path / "scored"))
    evaluated = run_cli("eval", str(copy), "--beam", "1", data_dir=data_dir)
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads((copy / "eval" / "test.json").read_text())
    assert run_cli("card", str(copy)).returncode == 0
    card = (copy / "README.md").read_text()
    assert f"`{report['signature']}`" in card and f"| {report['bleu']:.2f} |" in card
    # the same file, but of other weights: left out
    report["weights_sha256"] = "0" * 64
    (copy / "eval" / "test.json").write_text(json.dumps(report))
    assert run_cli("card", str(copy)).returncode == 0
    assert report["signature"] not in (copy / "README.md").read_text()


def test_an_older_run_s_card_leaves_out_what_it_did_not_record(run, tmp_path):
    copy = Path(shutil.copytree(run, tmp_path / "old"))
    for name in ("machine.json", "corpora.json", "README.md"):
        (copy / name).unlink()
    result = run_cli("card", str(copy), "--checkpoint", "last")
    assert result.returncode == 0, result.stderr
    card = (copy / "README.md").read_text()
    assert "| not recorded by this run |" in card
    assert "machine and precision: not recorded" in card and "trained in" not in card


def test_exports_carry_the_card(run, tmp_path):
    result = run_cli("export", str(run), "--output", str(tmp_path / "ct2"))
    assert result.returncode == 0, result.stderr
    card = (tmp_path / "ct2" / "README.md").read_text()
    assert "Model card of the CTranslate2 model folder export (float32 weights)" in card
    assert "CC-BY 2.0 FR" in card


def test_card_of_a_folder_that_is_not_a_run_is_one_line(tmp_path):
    assert_one_line_error(run_cli("card", str(tmp_path)), "not a run folder")


@pytest.mark.parametrize(("text", "spdx", "flags"), [
    ("CC-BY-NC-SA-4.0", "CC-BY-NC-SA-4.0", ["NC", "SA"]),
    ("CC-BY-ND-4.0", "CC-BY-ND-4.0", ["ND"]), ("ODbL-1.0", "ODbL-1.0", ["SA"]),
    ("CC-BY-4.0", "CC-BY-4.0", []), ("CC BY-NC-SA 4.0", None, []),  # free text: not read
    ("CC-BY 2.0 FR", None, []), (None, None, []),
])
def test_licence_flags_come_from_the_identifier_alone(text, spdx, flags):
    licence = Licence(text)
    assert licence.spdx == spdx and licence.flags() == flags
    assert ("check the terms" in licence.describe()) == (spdx is None)


def test_data_licence_is_one_corpus_form_and_a_new_data_set_drops_the_old_one():
    with pytest.raises(AttncliError, match="data.licence and data.corpora are both set"):
        parse_config({"data": {"corpora": [{"dataset": "a"}], "licence": "CC-BY-4.0"}})
    assert load_config(SMALL).data.licence == "CC-BY 2.0 FR"
    assert load_config(SMALL, ["data.dataset=multi30k"]).data.licence is None
    for order in (["data.licence=CC0-1.0", "data.dataset=x"],
                  ["data.dataset=x", "data.licence=CC0-1.0"]):
        assert load_config(SMALL, order).data.licence == "CC0-1.0"
    assert load_config(SMALL, ["data.dataset=tatoeba-en-de"]).data.licence == "CC-BY 2.0 FR"


def test_a_resume_may_change_the_licence_and_records_its_machine(data_dir, tmp_path):
    result = train(data_dir, tmp_path, SMALL, "--name", "r", sets=["train.max_steps=2"])
    assert result.returncode == 0, result.stderr
    resumed = resume(data_dir, tmp_path / "r", *TINY, "train.max_steps=4",
                     "data.licence=CC-BY-4.0", "data.attribution=someone")
    assert resumed.returncode == 0, resumed.stderr
    assert [m["from_step"] for m in json.loads((tmp_path / "r" / "machine.json").read_text())] \
        == [0, 2]
    card = (tmp_path / "r" / "README.md").read_text()
    assert "CC-BY-4.0 (SPDX; Creative Commons BY 4.0)" in card and "| someone |" in card
    assert "from update 2:" in card
