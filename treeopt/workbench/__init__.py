"""What the app works on, without Streamlit: datasets of acceptance statistics
(:mod:`~treeopt.workbench.datasets`), the demo's measured pricing
(:mod:`~treeopt.workbench.demo_pricing`), the Verify page's live run (:mod:`~treeopt.workbench.live`)
and the Plotly figures (:mod:`~treeopt.workbench.plots`, :mod:`~treeopt.workbench.plots_hardware`),
drawn in one style (:mod:`~treeopt.workbench.style`: a drafter's colour, a slowdown, units)
with numbers at one precision (:mod:`~treeopt.workbench.numbers`).
Pages call these and render; importing this package imports nothing else.

Layer: the app's services; may import the numpy layer, ``decoding``, ``drafters``,
``profiling``, ``assets`` and ``demo``.
"""
