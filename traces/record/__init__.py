"""How a trace is written, read and announced. The recorder turns a running turn's events into
steps, payloads and states (``recorder``; what each event writes on its step: ``step_values``;
the text a model request streams, sent live and saved now and then: ``streaming``) and writes
them through ``services``; people's ratings of an answer are ``feedback``. ``selectors`` are the
reads, with the rule of who sees which trace, and ``request_history`` rebuilds the model
requests a turn sent from their stored payloads; ``live`` announces each change on the channel
layer and ``consumers`` carry it to the inspector's socket. ``presentation`` (timeline bars,
state diffs, the turn tree) is here rather than with the pages because ``live`` renders
announced rows with it."""
