"""Streamlit pages of the treeopt app: widgets → library call → render, nothing else."""
