"""The HTTP side of textbento: request and response types, guards, answers, the one error shape.

The rule: no inference runtime (torch, onnxruntime, transformers) is imported here, so an API
worker never loads one; it reaches the model only through the Encoder (``serving/``).
"""
