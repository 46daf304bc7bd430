"""Thin entry point: regenerate the report of one preset (logic in magicpig.harness.report)."""
import argparse

from magicpig.harness.report import build_report

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--results", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--preset", required=True)
parser.add_argument("--gpu-results", default=None,
                    help="folder of `make gpu-check` outputs (default: gpu beside --results, e.g. results/gpu)")
args = parser.parse_args()
print(build_report(args.results, args.out, args.preset, args.gpu_results))
