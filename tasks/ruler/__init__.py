"""RULER (Hsieh et al., 2024): 13 long-context tasks sized to a target token length, registered as
``ruler/<task>``: the eight needle-in-a-haystack tasks (``niah``), variable tracking (``vt``), common and
frequent word extraction (``cwe``, ``fwe``) and question answering over documents (``qa``: qa_1, qa_2)."""
