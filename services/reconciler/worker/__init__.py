"""The reconciler worker runtime: partition ownership, per-key consumption, the decide step, timers.

Everything impure about reconciling lives here; the kind packages beside it stay pure.
"""
