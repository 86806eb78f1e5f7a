"""The typed documents treeopt reads and writes: checked fields, measurement settings, dtype
names, prompt files, step profiles, sweeps and verify reports.

Layer: numpy (these need not even numpy); may import ``errors``, ``files``, ``model`` and
``registry``.
"""
