"""Command-line scripts that put models into the BentoML model store."""
