"""treeopt: design, price, export and verify static speculation trees for draft-head decoding.

``import treeopt`` needs numpy only; torch, transformers and streamlit load where they are used
(:mod:`treeopt.drafters.heads`, :mod:`treeopt.decoding.calibrate`, :mod:`treeopt.decoding.loop`,
the app).

Layer: numpy, the package's face (the public API below), imported by no module of treeopt; may
import ``errors``, ``version``, ``model``, ``documents``, ``engines`` and ``pricing``.

>>> import treeopt
>>> trace = treeopt.RankTrace(np.array([[0, 0], [0, 1], [1, 0], [0, 0]], np.int16))
>>> growth = treeopt.grow(trace, method="empirical", max_nodes=3)
>>> growth.tree(3).paths, round(float(growth.expected_accept_length[3]), 4)
(((0,), (1,), (0, 0)), 2.5)
>>> treeopt.export(growth.tree(3), "medusa")
'[[0], [1], [0, 0]]'
"""

import numpy as np  # noqa: F401  (used by the doctest above)

from treeopt.documents.measure import Measurement
from treeopt.documents.step_profile import StepProfile, StepRecord
from treeopt.documents.sweep import Sweep, SweepPoint
from treeopt.documents.verify_report import VerifyReport
from treeopt.engines.forms import export, parse_tree
from treeopt.engines.registry import engine_problems
from treeopt.errors import TreeoptError
from treeopt.model.acceptance import expected_accept_length, node_probabilities
from treeopt.model.accuracy import AccuracyTable, read_accuracies
from treeopt.model.growth import Growth, grow, uniform_tree
from treeopt.model.simulation import Simulation, accept_lengths, held_out, simulate
from treeopt.model.step_growth import StepGrowth, grow_per_step
from treeopt.model.trace import RankTrace, merge_traces
from treeopt.model.tree import Tree
from treeopt.pricing.selection import Point, Selection, schedule
from treeopt.pricing.throughput import select
from treeopt.pricing.tree_files import load_tree_arg
from treeopt.version import __version__

__all__ = [
    "AccuracyTable",
    "Growth",
    "Measurement",
    "Point",
    "RankTrace",
    "Selection",
    "Simulation",
    "StepGrowth",
    "StepProfile",
    "StepRecord",
    "Sweep",
    "SweepPoint",
    "Tree",
    "TreeoptError",
    "VerifyReport",
    "accept_lengths",
    "engine_problems",
    "expected_accept_length",
    "export",
    "grow",
    "grow_per_step",
    "held_out",
    "load_tree_arg",
    "merge_traces",
    "node_probabilities",
    "parse_tree",
    "read_accuracies",
    "schedule",
    "select",
    "simulate",
    "uniform_tree",
    "__version__",
]
