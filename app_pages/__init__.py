"""Streamlit pages of the treeopt app: widgets → library call → render, nothing else.

Layer: the app; may import the numpy layer, ``demo`` and ``workbench``.
"""
