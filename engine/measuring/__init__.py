"""Measured ground truth: real training steps of a randomly initialised model, and the memory they used.

``vramwise.measure`` (:mod:`vramwise.measuring.steps`) is the entry point; see its module docstring
for the map of this package. Nothing here is imported by an estimate, and torch is imported only
when a step is prepared.
"""
