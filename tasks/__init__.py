"""Benchmark tasks, installed as ``magicpig_tasks``: ruler/, longbench/, gsm8k/, coqa/, mmlu/, infini_igsm/
(accuracy; built by name in ``magicpig_tasks.registry``) and experiments/ (attention-level experiments).

Importing the package registers the built-in tasks: each module below registers its task classes
(``@register``) when imported, in this order, which is the order of ``registry.TASK_NAMES``. A task module
that is not imported here is never registered.
"""
from magicpig_tasks.ruler import niah as _niah, vt as _vt, cwe as _cwe, fwe as _fwe, qa as _qa  # noqa: F401
from magicpig_tasks import longbench as _longbench, gsm8k as _gsm8k, coqa as _coqa  # noqa: F401
from magicpig_tasks import mmlu as _mmlu, infini_igsm as _infini_igsm  # noqa: F401
