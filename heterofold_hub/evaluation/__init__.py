"""Measuring transfer against native prefill: fidelity, retrieval, timing and memory, and README tables."""
