"""The case studies' figures, made from a run's saved arrays and plain numbers alone.

Each module draws one family of figures; a case module passes its arrays (``arrays.npz`` of a run folder)
and the few numbers a figure needs (names, sampling rates, truths), so ``twinfer report RUN_DIR`` re-renders
them and nothing here imports a case.
"""
