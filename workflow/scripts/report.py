"""Thin entry point: regenerate the report of one preset (logic in magicpig.harness.report)."""
import argparse
import json

from magicpig.harness.report import build_report
from magicpig.methods.plugins import load_methods

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--results", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--preset", required=True)
parser.add_argument("--methods-module", action="append", default=[],
                    help="the user's method modules (config `methods_module`), so their specs are read as methods")
parser.add_argument("--preset-config", type=json.loads, default=None,
                    help="the preset's config block as JSON (default: its block in config/*.yaml)")
parser.add_argument("--gpu-results", default=None,
                    help="the one folder of `make gpu-check` outputs read (default: results/gpu beside --results and "
                         "the committed GPU runs, figures/reference/gpu-check-*)")
args = parser.parse_args()
load_methods(args.methods_module, "--methods-module")
print(build_report(args.results, args.out, args.preset, args.preset_config, args.gpu_results))
