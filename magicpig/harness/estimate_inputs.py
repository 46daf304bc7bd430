"""``magicpig estimate inputs``: keys across many short inputs (paper Figs. 5a, 5b), from one model load.

    magicpig estimate inputs --model smollm2 --inputs 32 --sentences 50 --length 64 --out-dir DIR

Writes ``DIR/inputs_similarity.csv`` (per quantity, layer and kv-head: mean / min pairwise cosine across the
inputs) and ``DIR/inputs_matrix.csv`` (the pairwise cosine matrices at one middle layer); see
``magicpig_tasks.experiments.inputs``.
"""
from __future__ import annotations

import json
import sys

from magicpig.harness.result_files import INPUTS_MATRIX_CSV, INPUTS_SIMILARITY_CSV


def add_parser(esub) -> None:
    c = esub.add_parser("inputs", help="sink key and mean key across many short inputs (Figs. 5a, 5b)")
    c.add_argument("--model", default="smollm2", help="smollm2, a .gguf file, a model folder or a hub id")
    c.add_argument("--inputs", type=int, default=32, help="random token sequences (the sink key, Fig. 5a)")
    c.add_argument("--sentences", type=int, default=50, help="essay sentences (the mean key, Fig. 5b)")
    c.add_argument("--length", type=int, default=64, help="tokens of each random input")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    c.add_argument("--out-dir", default="results/estimation")
    c.set_defaults(func=run_inputs)


def matrix_layer(num_layers: int, dense: set[int]) -> int:
    """The layer of the heat maps: the middle one, or the next sparse layer after it."""
    layer = num_layers // 2
    while layer in dense and layer + 1 < num_layers:
        layer += 1
    return layer


def run_inputs(args) -> int:
    from magicpig.harness.argcheck import check_device, check_min, check_seed, check_writable_dir
    from magicpig.methods import MagicPIG
    from magicpig.models import load_model, resolve

    from magicpig_tasks.experiments import inputs as I

    check_min(args.inputs, 2, "--inputs")
    check_min(args.sentences, 2, "--sentences")
    check_min(args.length, 3, "--length")
    check_seed(args.seed)
    check_device(args.device)
    out_dir = check_writable_dir(args.out_dir, "--out-dir")
    resolve(args.model)
    I.essay_sentences(args.sentences, seed=args.seed)  # enough sentences, before the model loads
    net, tok = load_model(args.model, device=args.device)
    vectors = I.collect(net, tok, inputs=args.inputs, sentences=args.sentences, length=args.length, seed=args.seed,
                        progress=lambda m: print(m, file=sys.stderr, flush=True))
    num_layers = int(net.config.num_hidden_layers)
    dense = set(MagicPIG().dense_layer_set(num_layers))
    meta = {"model": args.model, "seed": args.seed, "length": args.length}
    sim = I.similarity(vectors)
    sim["dense_in_magicpig"] = sim["layer"].isin(dense)
    sim.assign(**meta).to_csv(out_dir / INPUTS_SIMILARITY_CSV.name, index=False)
    matrix = I.matrix(vectors, matrix_layer(num_layers, dense))
    matrix.assign(**meta).to_csv(out_dir / INPUTS_MATRIX_CSV.name, index=False)
    sparse = sim[~sim["dense_in_magicpig"]]
    print(json.dumps({q: {"mean_cos": round(float(g["mean_cos"].mean()), 4), "inputs": int(g["inputs"].iloc[0])}
                      for q, g in sparse.groupby("quantity")}, indent=2))
    return 0
