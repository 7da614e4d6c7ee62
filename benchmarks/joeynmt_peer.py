"""Hand one trained attncli model to JoeyNMT 2.3, so both tools decode the very same weights.

Why: a decoding-speed comparison is only fair when both sides translate with the same model
(same outputs, so the same lengths). JoeyNMT's Transformer has the same blocks as ours
(pre-norm, tied embeddings, scaled embeddings plus sin/cos positions); only the weight layout
differs, and its output layer has no bias. Two steps, each in the venv that has its library:

    # 1. attncli's venv: copy the run with the output bias set to zero (JoeyNMT has none)
    python benchmarks/joeynmt_peer.py zero-bias runs/m30k runs/m30k-nobias

    # 2. JoeyNMT's venv (joeynmt==2.3.0, sentencepiece==0.2.0): write a JoeyNMT model folder
    #    and a `joeynmt test` config for the plain-text test files PREFIX.en / PREFIX.de
    python benchmarks/joeynmt_peer.py to-joey runs/m30k-nobias joey-m30k \
        --anchor ../shared/anchors/joeynmt/multi30k-en-de.yaml --test PREFIX

    # then time both on the same machine:
    attncli eval runs/m30k-nobias --beam 5
    python -m joeynmt test joey-m30k/joey_test.yaml     # reads "Generation took ...[sec]"

Ids: attncli has pad=0 unk=1 bos=2 eos=3; JoeyNMT requires unk=0, pad=1, so the JoeyNMT
vocabulary is our piece list with ids 0 and 1 swapped and the tied embedding rows follow.
JoeyNMT keeps LayerNorm eps 1e-6 (ours 1e-5): logits then differ by ~4e-5, greedy outputs
are the same; beam outputs can differ a little because JoeyNMT's length penalty is GNMT's.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def zero_bias(src: Path, dst: Path) -> None:
    """Copy run ``src`` to ``dst`` with ``output_bias`` zeroed in the weight files."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    if dst.exists():
        raise SystemExit(f"{dst} exists; remove it first")
    shutil.copytree(src, dst)  # step folders, pointers, optimizer and state as they are
    for weights in sorted((dst / "checkpoints").glob("*/model.safetensors")):
        with safe_open(str(weights), framework="pt") as f:
            metadata = f.metadata()
        tensors = load_file(str(weights))
        tensors["output_bias"] = torch.zeros_like(tensors["output_bias"])
        save_file(tensors, str(weights), metadata=metadata)
    print(f"wrote {dst}")


def _read_safetensors(path: Path) -> dict:
    """safetensors without the package (JoeyNMT's venv lacks it): header JSON, then raw data."""
    import numpy as np
    import torch

    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header.pop("__metadata__", None)
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        data = np.frombuffer(raw[8 + size + start : 8 + size + end], dtype=dtypes[info["dtype"]])
        out[name] = torch.from_numpy(data.copy().reshape(info["shape"]))
    return out


def _joey_state(ours: dict, enc_layers: int, dec_layers: int, perm) -> dict:
    """attncli parameter names and layout -> JoeyNMT 2.3's (positional buffers excluded)."""
    sd: dict = {}

    def copy_pair(dst: str, src: str) -> None:
        sd[f"{dst}.weight"], sd[f"{dst}.bias"] = ours[f"{src}.weight"], ours[f"{src}.bias"]

    def attention(dst: str, src: str, fused: str) -> None:
        """Split our fused projection (qkv, or kv after a separate q) into JoeyNMT's layers."""
        names = ["q", "k", "v"] if fused == "qkv" else ["k", "v"]
        if fused == "kv":
            copy_pair(f"{dst}.q_layer", f"{src}.q")
        weights = ours[f"{src}.{fused}.weight"].chunk(len(names), 0)
        biases = ours[f"{src}.{fused}.bias"].chunk(len(names), 0)
        for name, w, b in zip(names, weights, biases, strict=True):
            sd[f"{dst}.{name}_layer.weight"], sd[f"{dst}.{name}_layer.bias"] = w, b
        copy_pair(f"{dst}.output_layer", f"{src}.out")

    def feed_forward(dst: str, src: str) -> None:
        copy_pair(f"{dst}.layer_norm", f"{src}.ff_block.norm")
        copy_pair(f"{dst}.pwff_layer.0", f"{src}.ff.net.0")
        copy_pair(f"{dst}.pwff_layer.3", f"{src}.ff.net.3")

    embedding = ours["src_embed.weight"][perm].contiguous()
    for key in ("src_embed.lut.weight", "trg_embed.lut.weight", "decoder.output_layer.weight"):
        sd[key] = embedding
    for i in range(enc_layers):
        src, dst = f"encoder_layers.{i}", f"encoder.layers.{i}"
        copy_pair(f"{dst}.layer_norm", f"{src}.attn_block.norm")
        attention(f"{dst}.src_src_att", f"{src}.self_attn", "qkv")
        feed_forward(f"{dst}.feed_forward", src)
    copy_pair("encoder.layer_norm", "encoder_norm")
    for i in range(dec_layers):
        src, dst = f"decoder_layers.{i}", f"decoder.layers.{i}"
        copy_pair(f"{dst}.x_layer_norm", f"{src}.self_block.norm")
        attention(f"{dst}.trg_trg_att", f"{src}.self_attn", "qkv")
        copy_pair(f"{dst}.dec_layer_norm", f"{src}.cross_block.norm")
        attention(f"{dst}.src_trg_att", f"{src}.cross_attn", "kv")
        feed_forward(f"{dst}.feed_forward", src)
    copy_pair("decoder.layer_norm", "decoder_norm")
    return sd


def to_joey(run: Path, out: Path, anchor: Path, test_prefix: str) -> None:
    """Write ``out``/{best.ckpt, vocab.txt, spm.model, joey_test.yaml} for ``joeynmt test``."""
    from types import SimpleNamespace

    import sentencepiece as spm
    import torch
    import yaml
    from joeynmt.config import _check_special_symbols
    from joeynmt.model import build_model
    from joeynmt.vocabulary import Vocabulary

    pointers = json.loads((run / "checkpoints" / "pointers.json").read_text())
    ours = _read_safetensors(run / "checkpoints" / pointers.get("best", pointers["last"])
                             / "model.safetensors")
    if float(ours["output_bias"].abs().max()) != 0.0:
        raise SystemExit(f"{run}: output_bias is not zero (JoeyNMT has none); run zero-bias")
    model_cfg = yaml.safe_load((run / "config.yaml").read_text())["model"]
    if not (model_cfg["norm"] == "pre" and model_cfg["tie_embeddings"] is True
            and model_cfg["scoring"] == "dot"):
        raise SystemExit(f"{run}: only pre-norm, tied, dot-product models have a JoeyNMT twin")

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy2(run / "spm.model", out / "spm.model")
    pieces = spm.SentencePieceProcessor(model_file=str(run / "spm.model"))
    itos = [pieces.id_to_piece(i) for i in range(pieces.get_piece_size())]
    if itos[:4] != ["<pad>", "<unk>", "<s>", "</s>"]:
        raise SystemExit(f"{run}/spm.model: unexpected special pieces {itos[:4]}")
    perm = torch.arange(len(itos))
    perm[0], perm[1] = 1, 0
    itos = [itos[int(i)] for i in perm]
    (out / "vocab.txt").write_text("".join(f"{p}\n" for p in itos), encoding="utf-8")

    cfg = yaml.safe_load(anchor.read_text())
    cfg["model_dir"] = str(out)
    data = cfg["data"]
    for split in ("train", "dev"):  # without dev, `joeynmt test` decodes the test set only
        data.pop(split, None)
    data["test"] = test_prefix
    data["special_symbols"] = {"unk_token": "<unk>", "unk_id": 0, "pad_token": "<pad>",
                               "pad_id": 1, "bos_token": "<s>", "bos_id": 2,
                               "eos_token": "</s>", "eos_id": 3}
    for side in ("src", "trg"):
        data[side]["voc_file"] = str(out / "vocab.txt")
        data[side]["tokenizer_cfg"]["model_file"] = str(out / "spm.model")
    for part in ("encoder", "decoder"):
        layers = model_cfg["enc_layers" if part == "encoder" else "dec_layers"]
        joey = cfg["model"][part]
        if (joey["num_layers"], joey["num_heads"], joey["hidden_size"], joey["ff_size"]) != (
                layers, model_cfg["heads"], model_cfg["d_model"], model_cfg["ff_dim"]):
            raise SystemExit(f"{anchor}: the {part} sizes differ from {run}'s model")
    (out / "joey_test.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    specials = SimpleNamespace(**_check_special_symbols(dict(data["special_symbols"])))
    vocab = Vocabulary(itos, specials)
    model = build_model(cfg["model"], src_vocab=vocab, trg_vocab=vocab)
    state = dict(model.state_dict())
    converted = _joey_state(ours, model_cfg["enc_layers"], model_cfg["dec_layers"], perm)
    missing = [k for k in state if k not in converted and not k.endswith(".pe.pe")]
    if missing or set(converted) - set(state):
        raise SystemExit(f"layout mismatch: missing {missing}, extra "
                         f"{sorted(set(converted) - set(state))}")
    state.update(converted)
    model.load_state_dict(state)  # strict: every shape checked
    torch.save({"model_state": model.state_dict(), "steps": 0}, out / "best.ckpt")
    print(f"wrote {out}/best.ckpt and {out}/joey_test.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    zero = commands.add_parser("zero-bias", help="copy a run with output_bias = 0")
    zero.add_argument("src", type=Path)
    zero.add_argument("dst", type=Path)
    joey = commands.add_parser("to-joey", help="write a JoeyNMT model folder (JoeyNMT's venv)")
    joey.add_argument("run", type=Path)
    joey.add_argument("out", type=Path)
    joey.add_argument("--anchor", type=Path, required=True, help="JoeyNMT config to start from")
    joey.add_argument("--test", required=True, help="plain-text test files PREFIX.{src,tgt}")
    args = parser.parse_args()
    if args.command == "zero-bias":
        zero_bias(args.src, args.dst)
    else:
        to_joey(args.run, args.out, args.anchor, args.test)


if __name__ == "__main__":
    main()
