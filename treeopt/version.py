"""The package's version, a leaf: what growth files, traces and demo manifests record as the
treeopt that wrote them, without importing the package's face (which imports them)."""

__version__ = "0.1.0"
