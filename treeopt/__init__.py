"""treeopt: design, price, export and verify static speculation trees for draft-head decoding.

``import treeopt`` needs numpy only; torch, transformers and streamlit load where they are used.
"""

from treeopt.accuracy import AccuracyTable, read_accuracies
from treeopt.errors import TreeoptError
from treeopt.trace import RankTrace, merge_traces
from treeopt.tree import Tree

__version__ = "0.1.0"

__all__ = [
    "AccuracyTable",
    "RankTrace",
    "Tree",
    "TreeoptError",
    "merge_traces",
    "read_accuracies",
    "__version__",
]
