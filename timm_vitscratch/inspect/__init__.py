"""Inspection: parameter counts, FLOPs, memory estimates, the per-layer table, attention maps, reports."""
