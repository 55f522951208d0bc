"""HTTP side of textbento: request/response types and the error shape. No model code."""
