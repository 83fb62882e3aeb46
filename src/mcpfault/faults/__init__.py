"""The fault engine: rules, seeded decisions, and one module per fault type (faults/catalog.py lists them)."""
