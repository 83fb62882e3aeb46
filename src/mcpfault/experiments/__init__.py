"""Experiments: a steady-state hypothesis, actions on a timeline, stop conditions, and a journal.

``plan`` reads a file into a pure plan; ``probes`` measures; ``runner`` performs the plan against a
proxy through its control API and writes the journal (FIS log schema v2), spans, metrics and report.
"""
