"""The benchmark harness: a registry of data sets, cases and contenders (registry), the
worker process that times one contender (worker), the parent that runs them in rounds
(runner), and the report (report: table and targets; chart: results.png).

Nothing here imports more than the standard library at module level: a worker may run
under another interpreter (a contender's own virtualenv).
"""
