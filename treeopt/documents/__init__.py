"""The typed documents treeopt reads and writes (fields, measurements, profiles, sweeps, reports;
numpy-free); imports :mod:`treeopt.model` and the drafter registry."""
