"""Questions the app asks of the calls, one module per page, each answer a DataFrame.

Every public function takes ``(store, filters, ..., *, options)`` and runs
SQL owned here with bound parameters, so pages stay thin and the same
answers are available to scripts and notebooks.
"""
