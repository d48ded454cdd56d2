"""Capacity, cost and energy planning over the scheduler and the store (docs/planning.md)."""
