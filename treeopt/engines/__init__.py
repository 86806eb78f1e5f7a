"""The engines' rules and forms: which trees each engine builds as drawn, and the text it reads
of a tree, of prompt-lookup settings and of TensorRT-LLM's node keys.

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents`` and ``registry``.
"""
