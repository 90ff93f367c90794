"""The trace pages: the trace list, a trace with its steps, tree and states, a step and its
payloads, ratings and the JSON download. They read through ``traces.record`` and render with
its ``presentation``."""
