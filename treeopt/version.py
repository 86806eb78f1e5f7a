"""The package's version, a leaf: what growth files, traces and demo manifests record as the
treeopt that wrote them, without importing the package's face (which imports them).

Layer: numpy, a leaf; may import nothing of treeopt.
"""

__version__ = "0.1.0"
