"""The pipeline: one request from eligibility to the decision and what goes back.

* :mod:`.flow`: ``Pipeline`` and ``load_pipeline``; ``Pipeline.search`` as named steps.
* :mod:`.decision`: ``Policy`` (the thresholds) and the decision as pure functions.
* :mod:`.confidence`: the calibrated probability of each candidate.
* Output: :mod:`.results` (``SearchResult``), :mod:`.definitions` (MCP / OpenAI / Anthropic),
  :mod:`.tokens` (token counts), :mod:`.explain` (per-tool explanations), :mod:`.serialize` (plain JSON).
"""
