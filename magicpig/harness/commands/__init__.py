"""Sub-commands of the ``magicpig`` CLI; each module defines ``register(subparsers)``.

Modules must import heavy dependencies (transformers, the compiled CPU module) inside their handlers,
so that ``magicpig --help`` stays fast.
"""


def add_preset_options(p) -> None:
    """``--preset`` and ``--config``: the commands that read one preset of the pipeline config."""
    p.add_argument("--preset", default=None, help="preset of the config (default: the config's `preset`)")
    p.add_argument("--config", default="config/config.yaml", help="pipeline config (default config/config.yaml)")
