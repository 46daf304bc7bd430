"""``python -m magicpig``: the harness's command line (loaded only when run, never by ``import magicpig``)."""
from magicpig.harness.cli import main

raise SystemExit(main())
