"""Evaluation (``toolrank eval``), never on the query path.

* :mod:`.harness`: rank-based metrics per stage and style.
* :mod:`.paired`: paired comparison of two rankers (exact McNemar).
* :mod:`.abstention`: does the best probability tell "a tool fits" from "none does"?
* :mod:`.stats`: the one AUROC, McNemar, ECE and sigmoid.
"""
