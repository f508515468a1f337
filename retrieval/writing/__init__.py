"""Text written by an LLM for a catalog: the chat client and its settings (``llm.py``), the prompt files,
the tool text and the example-request prompt (``prompting.py``), and the resumable runner of many
requests (``runner.py``).

Below the index (index-time example requests, :mod:`retrieval.index.examples`) and below training
(``toolrank generate``, :mod:`training.generate`), which both build on it. Submodules are imported
explicitly; nothing here is loaded on the query path.
"""

__all__: list[str] = []
