"""The rank-trace model: trees, traces, acceptance, growth and simulation (numpy); imports only
:mod:`treeopt.errors` and :mod:`treeopt.files`."""
