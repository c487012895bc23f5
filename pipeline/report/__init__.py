"""Where the time went: stage timers in; JSON, a text table, diagnostics and HTML out.

* :mod:`~pipeline.report.summary`: the stage clock, stage accounting, per-worker summaries, the text
  table and the JSON file;
* :mod:`~pipeline.report.diagnostics`: task overhead, stragglers, chunk costs and each check of a slow
  configuration with the advice that removes it;
* :mod:`~pipeline.report.html`: one self-contained page with plots;
* :mod:`~pipeline.report.sizing`: per-byte stage costs measured by one run, applied to another plan
  (``pipeline demo``'s projection to full scale).

Imports no other stage: it works on the task records and plan figures it is handed.
"""
