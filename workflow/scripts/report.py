"""Thin entry point: regenerate the report of one preset (logic in magicpig.harness.report)."""
import argparse

from magicpig.harness.report import build_report
from magicpig.methods.plugins import load_methods

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--results", required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--preset", required=True)
parser.add_argument("--methods-module", action="append", default=[],
                    help="the user's method modules (config `methods_module`), so their specs are read as methods")
args = parser.parse_args()
load_methods(args.methods_module, "--methods-module")
print(build_report(args.results, args.out, args.preset))
