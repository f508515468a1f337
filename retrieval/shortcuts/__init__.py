"""The shortcuts: what a request says outright, matched on the eligible catalog only.

* :mod:`.always_available`: configured tools that join when their trigger phrases appear (1.0).
* :mod:`.server_mentions`: a server named explicitly ("use github to ...") restricts the search.
* :mod:`.exact_names`: a tool named exactly ("run `get_shards`") is always in the result (0.9).
"""
