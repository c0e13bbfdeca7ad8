"""Code the kind reconcilers share (``rayjob``, ``rayservice``, ...), pure like them: no I/O, no clock,
no randomness. A module lands here when two kinds need the same logic, not when two kinds merely look
alike."""
