"""The LLM agent: a real model (or a recording of one) solving the task suite through the proxy.

- ``backend``: the ``LLMBackend`` interface, the Messages API wire types and the model's error tree.
- ``anthropic_backend``: the official ``anthropic`` SDK (the ``llm`` extra), imported only when used.
- ``agent``: the conversation loop, tool results, retries of the model API, spans, the token account.
- ``prompts``: the tasks in natural language and their answer schemas.
- ``recording``: ``--record DIR`` and ``--replay DIR``.
- ``prices``: the one price table.
- ``fakemodel``: a scripted model behind a real Messages API server on 127.0.0.1 (tests, offline demos).
"""
