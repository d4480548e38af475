"""steward's benchmarks: ``python -m benchmarks`` (or ``make bench``) runs them all.

Each module in ``benchmarks.__main__.MODULES`` has ``async def run() ->
list[Figure]``; the figures are printed beside their targets.
"""
