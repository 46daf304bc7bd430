"""Sub-commands of the ``magicpig`` CLI; each module defines ``register(subparsers)``.

Modules must import heavy dependencies (transformers, the compiled CPU module) inside their handlers,
so that ``magicpig --help`` stays fast.
"""
